package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/exectrace"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/demo"
)

func workerCmd(g *globals) *cobra.Command {
	var cfg executor.Config
	var drain time.Duration
	var metricsAddr, keyFile string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run an executor with the demo handlers (demo.noop, demo.sleep, demo.flaky, demo.fail, demo.gather)",
		Long: `Run an executor with the demo handlers. Real services embed the executor
package and register their own handlers; this command is for trying AX out
and for the end-to-end tests.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Codec, err = loadCodec(keyFile); err != nil {
				return err
			}
			d, err := g.startDaemon(cmd.Context(), "ax-worker", metricsAddr)
			if err != nil {
				return err
			}
			defer d.stop()
			log := d.log
			cfg.Logger = slogger(log)
			if d.tp != nil {
				cfg.Hooks = append(cfg.Hooks, exectrace.Hook(d.tp))
			}
			var m *promexec.Metrics
			if d.reg != nil {
				m = promexec.New(d.reg)
				cfg.Metrics = m
				cfg.Hooks = append(cfg.Hooks, m.Hook)
			}
			ex, err := executor.New(d.nc, cfg)
			if err != nil {
				return err
			}
			if m != nil {
				m.Watch(ex)
			}
			demo.Register(ex)
			started := d.health.Starting("executor")
			if err := ex.Start(cmd.Context()); err != nil {
				return err
			}
			started()
			log.Info().Str("executor", ex.ID()).Msg("worker running; Ctrl-C to stop")
			<-cmd.Context().Done()
			ctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			return ex.Stop(ctx)
		},
	}
	addExecutorFlags(cmd, &cfg)
	cmd.Flags().DurationVar(&drain, "drain", 30*time.Second, "how long Stop waits for running handlers")
	addMetricsFlag(cmd, &metricsAddr)
	addCodecFlag(cmd.Flags(), &keyFile)
	return cmd
}

// addExecutorFlags binds the executor's tunables to flags.
func addExecutorFlags(cmd *cobra.Command, cfg *executor.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.ID, "id", "", "executor id (default executor-<host>-<pid>-<random>)")
	f.StringSliceVar(&cfg.Capabilities, "capabilities", []string{"default"}, "capabilities this executor serves")
	f.Float64Var(&cfg.Capacity, "capacity", executor.DefaultCapacity, "capacity in estimated-cost units")
	f.DurationVar(&cfg.AckWait, "ack-wait", executor.DefaultAckWait, "lease of a running task without heartbeat before redelivery")
}
