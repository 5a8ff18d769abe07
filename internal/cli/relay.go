package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/outbox"
)

func relayCmd(g *globals) *cobra.Command {
	var dsn, metricsAddr string
	var cfg outbox.Config
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish the transactional outbox (ax_outbox rows written with outbox.Enqueue) to AX (several may run at once)",
		Long: `Run the outbox relay: it migrates the ax_outbox table, then claims pending
rows in batches (SELECT … FOR UPDATE SKIP LOCKED, so several relays share the
work without publishing a row twice), publishes them to task.submit.<type>
with pipelined JetStream publishes, marks them sent, and deletes sent rows
after --retention. A relay killed between publishing and marking creates no
duplicate task: each row's task id was fixed when it was enqueued. While
MySQL or NATS is down rows wait and the relay retries. See docs/outbox.md.`,
		Example: `  ax relay --mysql-dsn 'app:secret@tcp(127.0.0.1:3306)/shop'
  AX_MYSQL_DSN='app:secret@tcp(db:3306)/shop' ax relay --batch 1000 --metrics-addr :9465
  ax relay status --mysql-dsn 'app:secret@tcp(127.0.0.1:3306)/shop'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			d, err := g.startDaemon(ctx, "ax-relay", metricsAddr)
			if err != nil {
				return err
			}
			defer d.stop()
			started := d.health.Starting("relay")
			log := d.log
			cfg.Logger = slogger(log)
			dsn := mysqlDSNOrEnv(dsn)
			db, err := mirror.Open(dsn, &log)
			if err != nil {
				return err
			}
			defer db.Close()
			mctx, cancel := context.WithTimeout(ctx, 70*time.Second)
			v, err := outbox.Migrate(mctx, db)
			cancel()
			if err != nil {
				return mirror.Explain(err, dsn)
			}
			r, err := outbox.NewRelay(db, d.nc, cfg)
			if err != nil {
				return err
			}
			if err := r.Start(ctx); err != nil {
				return mirror.Explain(err, dsn)
			}
			started() // the table is migrated and the relay runs
			exportRelay(ctx, r, d.reg)
			log.Info().Str("nats", g.natsShown()).Int("schema_version", v).Msg("outbox relay running; Ctrl-C to stop")
			<-ctx.Done()
			stopCtx, cancelStop := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelStop()
			return r.Stop(stopCtx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dsn, "mysql-dsn", "", "MySQL DSN of the database holding ax_outbox, e.g. user:pass@tcp(host:3306)/app (default: env "+envMySQLDSN+")")
	fl.IntVar(&cfg.BatchSize, "batch", outbox.DefaultBatchSize, "rows claimed, published and marked per transaction")
	fl.DurationVar(&cfg.Interval, "interval", outbox.DefaultInterval, "longest wait of an idle relay before it looks again (outbox.Notify wakes it at once)")
	fl.DurationVar(&cfg.PublishTimeout, "publish-timeout", outbox.DefaultPublishTimeout, "wait for JetStream's acknowledgements of a batch")
	fl.DurationVar(&cfg.Retention, "retention", outbox.DefaultRetention, "keep sent rows this long (negative: forever)")
	fl.DurationVar(&cfg.RetentionInterval, "retention-interval", outbox.DefaultRetentionInterval, "how often sent rows past retention are deleted")
	fl.IntVar(&cfg.DeleteBatch, "delete-batch", outbox.DefaultDeleteBatch, "rows one retention DELETE removes")
	addMetricsFlag(cmd, &metricsAddr)
	cmd.AddCommand(relayStatusCmd(g))
	return cmd
}

// relayStatusCmd prints the outbox backlog (needs MySQL only).
func relayStatusCmd(g *globals) *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the outbox's pending rows and the age of the oldest",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dsn := mysqlDSNOrEnv(dsn)
			db, err := mirror.Open(dsn, nil)
			if err != nil {
				return err
			}
			defer db.Close()
			b, err := outbox.ReadBacklog(cmd.Context(), db)
			if err != nil {
				return mirror.Explain(err, dsn)
			}
			if g.jsonOutput() {
				return g.printJSON(b)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "Pending rows\t%d\n", b.Pending)
			if b.Pending > 0 {
				fmt.Fprintf(w, "Oldest pending\t%s (%s ago)\n", b.Oldest.Format(time.RFC3339), b.Age.Round(time.Millisecond))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&dsn, "mysql-dsn", "", "MySQL DSN (default: env "+envMySQLDSN+")")
	return cmd
}

// exportRelay samples the outbox backlog into the relay's gauges every 5s
// until ctx ends.
func exportRelay(ctx context.Context, r *outbox.Relay, reg *prometheus.Registry) {
	if reg == nil {
		return
	}
	m := metrics.NewRelay(reg,
		func() float64 { return float64(r.Stats().Rows) },
		func() float64 { return float64(r.Stats().Failures) })
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b, err := r.Backlog(qctx)
			cancel()
			if err == nil {
				m.LagSeconds.Set(b.Age.Seconds())
				m.Pending.Set(float64(b.Pending))
				m.DBDown.Set(0)
			} else if ctx.Err() == nil {
				m.DBDown.Set(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
