package cli

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/mirror"
)

// envMySQLDSN names the environment variable holding the audit database DSN.
const envMySQLDSN = "AX_MYSQL_DSN"

// mysqlDSNOrEnv returns the --mysql-dsn flag, or AX_MYSQL_DSN when it is empty.
// The environment is not the flag's default so --help never prints a password.
func mysqlDSNOrEnv(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(envMySQLDSN)
}

// mirrorFlags are the tunables of `ax mirror`.
type mirrorFlags struct {
	dsn string
	cfg mirror.Config
}

func mirrorCmd(g *globals) *cobra.Command {
	var f mirrorFlags
	var metricsAddr string
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Mirror task histories into MySQL for SQL audit queries (several may run at once)",
		Long: `Run the audit mirror: a durable consumer of AX_TASKS that writes every task
event, the current row of every task and every execution attempt into MySQL
(or MariaDB). JetStream stays the source of truth; while MySQL is down the
mirror holds its batch, retries and logs its growing lag, and tasks keep
running. See docs/mysql-mirror.md.`,
		Example: `  ax mirror --mysql-dsn 'ax:secret@tcp(127.0.0.1:3306)/ax'
  AX_MYSQL_DSN='ax:secret@tcp(db:3306)/ax' ax mirror --retention 720h
  ax mirror lag`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			d, err := g.startDaemon(ctx, "ax-mirror", metricsAddr)
			if err != nil {
				return err
			}
			defer d.stop()
			log := d.log
			f.cfg.Logger = &log
			m, err := mirror.NewFromDSN(d.nc, mysqlDSNOrEnv(f.dsn), f.cfg)
			if err != nil {
				return err
			}
			started := d.health.Starting("mirror")
			d.health.Add("mysql", mirrorWrites(m))
			if err := m.Start(ctx); err != nil {
				_ = m.Stop(context.Background())
				return err
			}
			started()
			exportMirrorLag(ctx, m, d.reg)
			log.Info().Str("nats", g.natsShown()).Msg("mirror running; Ctrl-C to stop")
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return m.Stop(stopCtx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dsn, "mysql-dsn", "", "MySQL DSN, e.g. user:pass@tcp(host:3306)/ax (default: env "+envMySQLDSN+")")
	fl.IntVar(&f.cfg.Batch, "batch", mirror.DefaultBatch, "events written per transaction")
	fl.DurationVar(&f.cfg.AckWait, "ack-wait", mirror.DefaultAckWait, "how long a batch of a mirror that died stays unacknowledged before another mirror takes it")
	fl.DurationVar(&f.cfg.RetentionAge, "retention", mirror.DefaultRetentionAge, "delete rows older than this (negative: keep forever)")
	fl.DurationVar(&f.cfg.RetentionInterval, "retention-interval", mirror.DefaultRetentionInterval, "how often retention runs")
	fl.DurationVar(&f.cfg.LagInterval, "lag-interval", mirror.DefaultLagInterval, "how often the lag is checked (and logged when it grows)")
	fl.Uint64Var(&f.cfg.LagWarnEvents, "lag-warn", mirror.DefaultLagWarnEvents, "pending events from which a growing lag is a warning")
	addMetricsFlag(cmd, &metricsAddr)
	cmd.AddCommand(mirrorLagCmd(g))
	return cmd
}

// mirrorLagCmd prints the shared mirror consumer's lag (needs NATS only).
func mirrorLagCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "lag",
		Short: "Show how far the audit mirror is behind AX_TASKS",
		Args:  cobra.NoArgs,
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, _ []string) error {
			l, err := mirror.ConsumerLag(ctx, js, time.Now())
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(l)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "Pending\t%d\n", l.Pending)
			fmt.Fprintf(w, "In flight\t%d\n", l.InFlight)
			if l.Behind() {
				fmt.Fprintf(w, "Oldest unmirrored\t%s (%s ago)\n", l.OldestUnmirrored.Format(time.RFC3339), l.Age.Round(time.Millisecond))
			} else {
				fmt.Fprintln(w, "Status\tcaught up")
			}
			return w.Flush()
		}),
	}
}

// startMirror runs the audit mirror inside another process (ax orchestrator
// --mysql-dsn, ax dev). It returns once the mirror is running; an unreachable
// MySQL is not an error (the mirror retries in the background), bad
// credentials, missing privileges or a newer schema are. stop is idempotent.
func startMirror(ctx context.Context, nc *nats.Conn, dsn string, log zerolog.Logger, reg *prometheus.Registry) (stop func(context.Context) error, err error) {
	m, err := mirror.NewFromDSN(nc, dsn, mirror.Config{Logger: &log})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		_ = m.Stop(context.Background())
		return nil, err
	}
	exportMirrorLag(ctx, m, reg)
	return m.Stop, nil
}
