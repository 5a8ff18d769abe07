package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/bench"
)

func benchCmd(g *globals) *cobra.Command {
	var cfg bench.Config
	var embedded bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure no-op tasks end to end (submit → ready → executor → completed → succeeded)",
		Long: `Runs an orchestrator and an executor in this process against an embedded
NATS server (or --nats with --external) and measures two phases:
  throughput: --tasks no-op tasks submitted as fast as possible; tasks/s from
              the first submit to the last success;
  steady:     --rate tasks/s for --duration; latency percentiles of
              submit→start (handler entered) and submit→succeeded (recorded).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !embedded {
				cfg.URL = g.natsURL
			}
			log := g.logger()
			cfg.Logger = &log
			phases, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(phases)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "phase\ttasks\tseconds\ttasks/s\tstart p50\tp90\tp99\tmax\tdone p50\tp90\tp99\tmax\t")
			ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
			for _, p := range phases {
				fmt.Fprintf(w, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, p.Tasks, p.Elapsed.Seconds(), p.TasksPerSec,
					ms(p.SubmitToStart.P50), ms(p.SubmitToStart.P90), ms(p.SubmitToStart.P99), ms(p.SubmitToStart.Max),
					ms(p.SubmitToDone.P50), ms(p.SubmitToDone.P90), ms(p.SubmitToDone.P99), ms(p.SubmitToDone.Max))
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Tasks, "tasks", 20000, "tasks in the throughput phase (0 skips it)")
	f.IntVar(&cfg.Rate, "rate", 1000, "tasks/s in the steady phase (0 skips it)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of the steady phase")
	f.Float64Var(&cfg.Capacity, "capacity", 512, "executor capacity")
	f.BoolVar(&cfg.SyncAlways, "sync-always", false, "embedded server fsyncs every write")
	f.BoolVar(&embedded, "embedded", true, "use an embedded server (false: the --nats server)")
	return cmd
}
