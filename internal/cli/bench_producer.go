package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/bench"
)

func benchProducerCmd(g *globals) *cobra.Command {
	var cfg bench.ProducerConfig
	var dsn string
	var embedded bool
	cmd := &cobra.Command{
		Use:   "producer",
		Short: "Measure the producer side: Submitter.Submit's cost, tasks/s into AX, and the outbox relay's rows/s",
		Long: `Runs an orchestrator and an executor in this process against an embedded
NATS server (or --nats with --embedded=false) and measures:
  submit:  the cost of one sdk.Submitter Submit call (ns; --calls calls timed one by one);
  rate:    --tasks tasks through a Submitter with the default bounded buffer,
           from the first Submit to Close (every task acknowledged by JetStream);
  outbox:  with --mysql-dsn (an empty database): --outbox-rows rows enqueued in
           transactions of 500, then published by one relay (rows/s).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.URL, cfg.NATSOptions, cfg.Logger, cfg.MySQLDSN, err = g.benchTarget(embedded, dsn); err != nil {
				return err
			}
			res, err := bench.Producer(cmd.Context(), cfg)
			if done, err := g.benchJSON(res, err); done {
				return err
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "Submit call\t%.0f ns mean, p50 %d ns, p99 %d ns, max %d ns\n", res.SubmitNs, res.SubmitP50Ns, res.SubmitP99Ns, res.SubmitMaxNs)
			fmt.Fprintf(w, "Submitter rate\t%d tasks in %.2fs: %.0f tasks/s acknowledged\n", res.Tasks, res.Elapsed.Seconds(), res.TasksPerSec)
			if res.OutboxRows > 0 {
				fmt.Fprintf(w, "Outbox\t%d rows: enqueue %.0f rows/s, relay %.0f rows/s\n", res.OutboxRows, res.EnqueueRowsPerSec, res.RelayRowsPerSec)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Tasks, "tasks", 100_000, "tasks in the rate phase")
	f.IntVar(&cfg.Calls, "calls", 100_000, "Submit calls timed one by one")
	f.IntVar(&cfg.Submitter.BatchSize, "batch", 0, "Submitter batch size (0: default 500)")
	f.DurationVar(&cfg.Submitter.FlushInterval, "flush-interval", 0, "Submitter flush interval (0: default 1s)")
	f.IntVar(&cfg.Submitter.MaxBuffered, "max-buffered", 0, "Submitter buffer bound (0: default 10,000)")
	f.BoolVar(&cfg.SyncAlways, "sync-always", false, "embedded server fsyncs every write")
	f.BoolVar(&embedded, "embedded", true, "use an embedded server (false: the --nats server)")
	f.StringVar(&dsn, "mysql-dsn", "", "also measure the outbox relay on this (empty) database (default: env AX_MYSQL_DSN)")
	f.IntVar(&cfg.OutboxRows, "outbox-rows", 20_000, "rows in the outbox phase")
	return cmd
}
