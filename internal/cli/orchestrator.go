package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

func orchestratorCmd(g *globals) *cobra.Command {
	var cfg orchestrator.Config
	var dsn, metricsAddr string
	cmd := &cobra.Command{
		Use:   "orchestrator",
		Short: "Run an orchestrator against a NATS server (several may run at once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := g.startDaemon(cmd.Context(), "ax-orchestrator", metricsAddr)
			if err != nil {
				return err
			}
			defer d.stop()
			log, nc, reg := d.log, d.nc, d.reg
			cfg.Logger, cfg.TracerProvider = slogger(log), d.tp
			om := orchestratorMetrics(reg, &cfg)
			o, err := orchestrator.New(nc, cfg)
			if err != nil {
				return err
			}
			om(o)
			ctx := cmd.Context()
			started := d.health.Starting("orchestrator")
			if err := o.Start(ctx); err != nil {
				return err
			}
			started()
			// The stop's grace counts from the stop, not from the start
			// (an orchestrator up longer than it used to stop with its
			// deadline already passed: exit 1, messages in hand unfinished).
			stopping := func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), stopGrace)
			}
			if dsn := mysqlDSNOrEnv(dsn); dsn != "" {
				stopMirror, err := startMirror(ctx, nc, dsn, log, reg)
				if err != nil {
					sctx, cancel := stopping()
					defer cancel()
					_ = o.Stop(sctx)
					return err
				}
				defer func() {
					sctx, cancel := stopping()
					defer cancel()
					_ = stopMirror(sctx)
				}()
			}
			log.Info().Str("nats", g.natsShown()).Msg("orchestrator running; Ctrl-C to stop")
			<-ctx.Done()
			sctx, cancel := stopping()
			defer cancel()
			return o.Stop(sctx)
		},
	}
	addOrchestratorFlags(cmd, &cfg)
	addMetricsFlag(cmd, &metricsAddr)
	cmd.Flags().StringVar(&dsn, "mysql-dsn", "", "also run the MySQL audit mirror in this process (default: env "+envMySQLDSN+")")
	return cmd
}

// addOrchestratorFlags binds the orchestrator's tunables to flags.
func addOrchestratorFlags(cmd *cobra.Command, cfg *orchestrator.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.NodeID, "node-id", "", "name of this orchestrator in the audit trail (default orchestrator-<host>-<pid>)")
	f.IntVar(&cfg.Workers, "workers", 0, "messages handled concurrently per consumer, and direct requests at once (default 64, or 256 with group commit on)")
	f.DurationVar(&cfg.AckWait, "ack-wait", orchestrator.DefaultAckWait, "how long a message held by an orchestrator that died waits before another takes it")
	f.IntVar(&cfg.MaxPayload, "max-payload", 0, "largest accepted payload in bytes, encoded (default 256 KiB)")
	f.IntVar(&cfg.Limits.MaxGraphTasks, "max-graph-tasks", task.MaxGraphTasks, "most tasks in one submitted graph; a larger graph is rejected (may be lowered, not raised)")
	f.IntVar(&cfg.Limits.MaxDependencies, "max-dependencies", task.MaxDependencies, "most depends_on entries of one task; a task with more is rejected (may be lowered, not raised)")
	f.IntVar(&cfg.Limits.MaxShards, "max-shards", task.MaxShards, "most shards one planner may return; a larger plan fails its task (may be lowered, not raised)")
	f.IntVar(&cfg.Limits.MaxEventWaitersPerSubject, "max-event-waiters-per-subject", orchestrator.DefaultMaxEventWaitersPerSubject, "most tasks waiting for (wait_for) or cancelled by (cancel_on) events of one subject; the registration past it fails its task (negative: unbounded)")
	f.IntVar(&cfg.Limits.MaxTaskTypes, "max-task-types", 0, "most distinct task types the cluster accepts new tasks for, recorded in AX_TYPES (give every orchestrator the same value; 0: unlimited)")
	f.BoolVar(&cfg.AcceptTokenless, "accept-tokenless-executors", false, "accept reports, claims and leases without an execution token, from executors older than this orchestrator, while they are upgraded (a wrong token is refused all the same)")
	f.DurationVar(&cfg.Retry.Base, "retry-base", orchestrator.DefaultRetryBase, "delay before the first retry")
	f.Float64Var(&cfg.Retry.Factor, "retry-factor", orchestrator.DefaultRetryFactor, "backoff multiplier per retry")
	f.DurationVar(&cfg.Retry.Max, "retry-max", orchestrator.DefaultRetryMax, "largest backoff delay before jitter")
	f.IntVar(&cfg.Topology.Replicas, "replicas", 0, "stream replicas, e.g. 3 on a NATS cluster (0 keeps the streams' count, 1 for new ones; lowering it is refused: use `ax topology --replicas N`)")
	f.Var(mibFlag{&cfg.DispatchCacheBytes}, "dispatch-cache-mib", "memory (MiB) for the recent dispatches kept so a report is applied without reading its task back; a report whose dispatch fell out costs a record read, as under a backlog of more queued tasks than fit (default 64, about 60,000 small records)")
	f.Uint64Var(&cfg.MaxDeliveries, "max-deliveries", orchestrator.DefaultMaxDeliveries, "deliveries of a message that keeps failing before it is kept as poison (ax poison)")
	groupCommitFlag(f, &cfg.Topology.GroupCommit)
	readyFlags(f)
	f.DurationVar(&cfg.Topology.DLQMaxAge, "dlq-max-age", 0, "keep dead letters this long in AX_DLQ (0: keep the stream's setting, for ever at first; negative: for ever); the tasks' records stay failed")
	f.Var(dlqRetentionFlag{&cfg.DeadLetterRetention}, "dlq-retention", "keep one task type's dead letters shorter, repeatable: TYPE=DURATION (e.g. email.send=72h)")
	f.DurationVar(&cfg.Topology.TaskHistoryMaxAge, "history-max-age", 0, "remove a finished task's history this long after it finished (0: keep for ever); unfinished tasks are never removed")
	f.DurationVar(&cfg.DependencyTimeout, "dependency-timeout", orchestrator.DefaultDependencyTimeout, "how long a task waits for a depends_on id that does not exist before it is cancelled (a spec's dependency_timeout overrides it)")
	f.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", orchestrator.DefaultReconcileInterval, "how long an unfinished task may stand still before the reconciler first looks at it")
	f.DurationVar(&cfg.ReconcileMaxInterval, "reconcile-max-interval", orchestrator.DefaultReconcileMaxInterval, "longest gap between the reconciler's looks at a task that stands still")
	f.DurationVar(&cfg.RunGrace, "run-grace", orchestrator.DefaultRunGrace, "how long past start + timeout a running task with no live lease is given before its attempt fails with 'lease expired'")
	f.Var(keyLimitsFlag{&cfg.KeyLimits}, "key-limit", "a limit per key, repeatable: PATTERN:SETTING,… with concurrency=N, rate=N/DURATION, adaptive, min=N, target-latency=DURATION, weight=N (e.g. 'customer.*:concurrency=5,rate=100/1s'); `ax limits set` replaces one at run time")
	f.IntVar(&cfg.FairWindow, "fair-window", orchestrator.DefaultFairWindow, "most dispatches one capability and priority may hold waiting for an executor before tasks with a fairness key queue and go in turn by key; within it the window holds about a second of the executors' work (-1: no fairness)")
	f.IntVar(&cfg.RetryBudget.Limit, "retry-budget", orchestrator.DefaultRetryBudgetLimit, "retries of one task type that may start per --retry-window")
	f.DurationVar(&cfg.RetryBudget.Width, "retry-window", orchestrator.DefaultRetryBudgetWidth, "window of the retry budget")
	f.Float64Var(&cfg.Breaker.Threshold, "breaker-threshold", orchestrator.DefaultBreakerThreshold, "failure ratio that opens a type's circuit breaker (1 disables breakers)")
	f.IntVar(&cfg.Breaker.MinVolume, "breaker-min-volume", orchestrator.DefaultBreakerMinVolume, "attempts in the window before a breaker may open")
	f.DurationVar(&cfg.Breaker.Window, "breaker-window", orchestrator.DefaultBreakerWindow, "sliding window of a breaker")
	f.DurationVar(&cfg.Breaker.Cooldown, "breaker-cooldown", orchestrator.DefaultBreakerCooldown, "how long an open breaker holds tasks before probing")
	f.IntVar(&cfg.Breaker.Probes, "breaker-probes", orchestrator.DefaultBreakerProbes, "tasks let through while half-open")
	f.DurationVar(&cfg.Breaker.ProbeTimeout, "breaker-probe-timeout", orchestrator.DefaultBreakerProbeTimeout, "how long a half-open breaker waits for its probes' outcomes before letting a fresh set through")
}

// mibFlag sets a byte count given in MiB (0 or unset: the default).
type mibFlag struct{ bytes *int64 }

func (f mibFlag) String() string {
	if f.bytes == nil || *f.bytes == 0 {
		return ""
	}
	return strconv.FormatInt(*f.bytes>>20, 10)
}

func (f mibFlag) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<20 {
		return fmt.Errorf("want a whole number of MiB from 0 to 1048576, not %q", s)
	}
	*f.bytes = n << 20
	return nil
}

func (mibFlag) Type() string { return "MiB" }

// stopGrace is how long a stopping orchestrator (and the mirror it runs)
// may take to finish the messages in hand.
var stopGrace = 30 * time.Second
