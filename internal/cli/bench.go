package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/bench"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// benchTarget returns what the bench commands' --embedded and --mysql-dsn
// flags choose: the --nats server's URL and authentication (empty: an
// embedded server), the logger and the MySQL DSN (default: env AX_MYSQL_DSN).
func (g *globals) benchTarget(embedded bool, dsn string) (url string, opts []nats.Option, log *zerolog.Logger, mysqlDSN string, err error) {
	if !embedded {
		if url, opts, err = g.natsTarget(); err != nil {
			return "", nil, nil, "", err
		}
	}
	l := g.logger()
	return url, opts, &l, mysqlDSNOrEnv(dsn), nil
}

// benchJSON reports whether a bench command is done after its run: when it
// failed (with err) or its result res is printed as JSON.
func (g *globals) benchJSON(res any, err error) (bool, error) {
	if err != nil {
		return true, err
	}
	if g.jsonOutput() {
		return true, g.printJSON(res)
	}
	return false, nil
}

func benchCmd(g *globals) *cobra.Command {
	var cfg bench.Config
	var embedded bool
	var dsn, cpuProfile, memProfile string
	var scen scenarios
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure no-op tasks end to end (submit → ready → executor → completed → succeeded)",
		Long: `Runs an orchestrator (or --orchestrators of them, sharing the work as
separate processes would) and an executor in this process against an
embedded NATS server (or --nats with --embedded=false) and measures two phases:
  throughput: --tasks no-op tasks submitted as fast as possible; tasks/s from
              the first submit to the last success;
  steady:     --rate tasks/s for --duration; latency percentiles of
              submit→start (handler entered) and submit→succeeded (recorded).

--fairness and --adaptive run scenarios instead of the phases, each mode
on a fresh embedded server:
  --fairness: tenant A submits --fairness-tasks tasks (fairness key A;
              an executor of --fairness-capacity running handlers of
              --fairness-handler-time, slower than the intake), then, once
              they are taken in, tenant B 100 at the same priority
              (fairness key B, in batches of --fairness-b-batch);
              B's submit→start and A's throughput with fairness (the
              default window) and without (window -1), side by side.
  --adaptive: --adaptive-tasks tasks under the concurrency key
              "downstream" (concurrency 64) call a simulated downstream
              serving 20 calls at once, --adaptive-call-time each
              (default 100ms: 200 calls/s, below what AX runs here), that
              answers 429
              (retry after 100ms) beyond; the adaptive limit's curve every
              250ms and a summary, against the fixed limit of 64. The
              circuit breaker and the retry budget are off in both runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.URL, cfg.NATSOptions, cfg.Logger, cfg.MySQLDSN, err = g.benchTarget(embedded, dsn); err != nil {
				return err
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if memProfile != "" {
				defer writeAllocProfile(memProfile)
			}
			if scen.fairness || scen.adaptive {
				return g.runScenarios(cmd, cfg, scen)
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if done, err := g.benchJSON(res, err); done {
				return err
			}
			phases := res.Phases
			fmt.Fprintf(g.stdout, "orchestrators: %d", res.Orchestrators)
			if res.Servers > 1 {
				fmt.Fprintf(g.stdout, ", spread over %d servers", res.Servers)
			}
			fmt.Fprintln(g.stdout)
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "phase\ttasks\tseconds\ttasks/s\tstart p50\tp90\tp99\tmax\tdone p50\tp90\tp99\tmax\t")
			for _, p := range phases {
				fmt.Fprintf(w, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, p.Tasks, p.Elapsed.Seconds(), p.TasksPerSec,
					ms(p.SubmitToStart.P50), ms(p.SubmitToStart.P90), ms(p.SubmitToStart.P99), ms(p.SubmitToStart.Max),
					ms(p.SubmitToDone.P50), ms(p.SubmitToDone.P90), ms(p.SubmitToDone.P99), ms(p.SubmitToDone.Max))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, p := range phases {
				names := make([]string, 0, len(p.StoredPerTask))
				total, onDisk := 0.0, 0.0
				for name, n := range p.StoredPerTask {
					names = append(names, name)
					total += n
					if !p.InMemory[name] {
						onDisk += n
					}
				}
				sort.Strings(names)
				fmt.Fprintf(g.stdout, "\nstored per task during %s: %.2f messages (", p.Name, total)
				for i, name := range names {
					if i > 0 {
						fmt.Fprint(g.stdout, ", ")
					}
					fmt.Fprintf(g.stdout, "%s %.2f", name, p.StoredPerTask[name])
					if p.InMemory[name] {
						fmt.Fprint(g.stdout, " in memory")
					}
				}
				fmt.Fprintf(g.stdout, "), %.2f on disk; AX_TASKS %.0f bytes per task\n", onDisk, p.TaskBytes)
				if t := p.ServerTraffic; t != nil {
					fmt.Fprintf(g.stdout, "server traffic per task during %s: %s (the bench's observer of AX_TASKS included)\n", p.Name, traffic(t))
				}
				if p.CPUPerTask > 0 {
					fmt.Fprintf(g.stdout, "CPU per task during %s: %s (the whole bench process: orchestrators, executor, producer, observer, and an embedded server)\n",
						p.Name, p.CPUPerTask.Round(time.Microsecond))
				}
			}
			for _, p := range phases {
				printWork(g, p)
			}
			for _, p := range phases {
				if k := p.Takeover; k != nil {
					fmt.Fprintf(g.stdout, "\ntakeover: %s killed %s into %s (its connection closed, as by kill -9); %d tasks took over 1s from submission to success, the longest %s; none lost",
						k.Orchestrator, k.After, p.Name, k.Slow, ms(k.Longest))
					if p.DuplicateStarts > 0 {
						fmt.Fprintf(g.stdout, ", %d started twice", p.DuplicateStarts)
					}
					fmt.Fprintln(g.stdout)
				}
			}
			for _, p := range phases {
				if p.Backlog > 0 {
					fmt.Fprintf(g.stdout, "\nbacklog probe: a p0 task submitted right after %d p5 tasks started %s after its submission\n",
						p.Backlog, ms(p.UrgentStart))
				}
			}
			for _, p := range phases {
				if p.DelayedTasks > 0 {
					l := p.DelayedLateness
					fmt.Fprintf(g.stdout, "\ndelayed tasks (run_at) during %s: %d, start lateness p50 %s p90 %s p99 %s max %s\n",
						p.Name, p.DelayedTasks, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
				}
			}
			if res.PeakRSS > 0 {
				fmt.Fprintf(g.stdout, "\npeak memory of the bench process (resident, before the bare JetStream loop): %.0f MiB\n", float64(res.PeakRSS)/(1<<20))
			}
			if b := res.Bare; b != nil {
				fmt.Fprintf(g.stdout, "\nbare JetStream on the same server (work queue, %d workers: fetch → publish → ack): %.0f jobs/s", b.Workers, b.JobsPerSec)
				for _, p := range phases {
					if p.Name == "throughput" {
						fmt.Fprintf(g.stdout, "; AX's throughput is %.0f%% of it", 100*p.TasksPerSec/b.JobsPerSec)
					}
				}
				fmt.Fprintln(g.stdout)
				if t := b.ServerTraffic; t != nil {
					fmt.Fprintf(g.stdout, "server traffic per bare job: %s\n", traffic(t))
				}
			}
			if l := res.Loop; l != nil {
				fmt.Fprintf(g.stdout, "\nminimal durable job loop on the same server (no orchestrator: compare-and-set creation record = dispatch, compare-and-set final record, atomic batches, AckAll; at most %d jobs in hand, over %d stream(s)): %.0f jobs/s, %d atomic batches",
					l.Workers, l.Streams, l.JobsPerSec, l.Batches)
				for _, p := range phases {
					if p.Name == "throughput" {
						fmt.Fprintf(g.stdout, "; AX's throughput is %.0f%% of it", 100*p.TasksPerSec/l.JobsPerSec)
					}
				}
				fmt.Fprintln(g.stdout)
			}
			if m := res.Mirror; m != nil {
				fmt.Fprintf(g.stdout, "\nMySQL mirror: %d events in %.1fs (%.0f events/s over the whole run), max lag %s, max backlog %d events\n",
					m.Events, m.Elapsed.Seconds(), m.EventsPerSec, m.MaxLag.Round(time.Millisecond), m.MaxPending)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Tasks, "tasks", 20000, "tasks in the throughput phase (0 skips it)")
	f.IntVar(&cfg.Rate, "rate", 1000, "tasks/s in the steady phase (0 skips it)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of the steady phase")
	f.Float64Var(&cfg.Capacity, "capacity", 512, "executor capacity")
	f.BoolVar(&cfg.SyncAlways, "sync-always", false, "embedded server fsyncs every write")
	f.BoolVar(&cfg.GroupCommit, "group-commit", false, "turn group commit on, as `ax topology --group-commit` (batched record writes and submissions)")
	f.BoolVar(&cfg.Cluster, "cluster", false, "run three clustered embedded servers and R3 streams (with --sync-always: every node fsyncs every write)")
	f.IntVar(&cfg.Orchestrators, "orchestrators", 1, "orchestrators to run, each on its own connection, sharing the work as that many `ax orchestrator` processes (with --cluster: spread over the servers)")
	f.DurationVar(&cfg.KillOrchestrator, "kill-orchestrator", 0, "with --orchestrators 2 or more: kill the last one this long into the steady phase (its connection closed at once, as by kill -9) and report how long its tasks waited for the others to take them over (0: none)")
	f.Var(mibFlag{&cfg.DispatchCacheBytes}, "dispatch-cache-mib", "each orchestrator's dispatch cache, as `ax orchestrator --dispatch-cache-mib` (default 64)")
	f.BoolVar(&embedded, "embedded", true, "use an embedded server (false: the --nats server)")
	f.IntVar(&cfg.Backlog, "backlog", 0, "backlog probe: submit this many p5 tasks at once, then a p0, and report the p0's submit→start (0 skips it)")
	f.IntVar(&cfg.Loop, "loop", 0, "jobs for the minimal durable job loop on the same server (stream AX_BENCH_LOOP, removed after): what JetStream allows a durable, fenced job with no orchestrator, in the same storage mode (0 skips it)")
	f.IntVar(&cfg.LoopWorkers, "loop-workers", bench.BareWorkers, "jobs the minimal durable loop holds in hand at most (as that many workers)")
	f.IntVar(&cfg.LoopStreams, "loop-streams", 1, "streams the minimal durable loop splits its jobs over (AX_BENCH_LOOP0…), each with its own producer, executor loop and share of the jobs in hand: a partitioned store")
	f.IntVar(&cfg.Bare, "bare", 20000, "jobs for the bare JetStream reference loop on the same server (streams AX_BENCH_BARE_IN/OUT, removed after), printed beside AX's throughput (0 skips it)")
	f.IntVar(&cfg.Delayed, "delayed", 200, "delayed tasks (run_at 2s ahead) mixed into the steady phase; their start lateness is reported")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole bench process (server, orchestrator, executor) to this file")
	f.StringVar(&memProfile, "memprofile", "", "write an allocation profile of the whole bench process to this file when it ends (go tool pprof -sample_index=alloc_space)")
	f.StringVar(&dsn, "mysql-dsn", "", "also run the MySQL audit mirror and report its rate and lag (default: env AX_MYSQL_DSN)")
	f.BoolVar(&scen.fairness, "fairness", false, "run the fairness scenario (tenant A's backlog, then tenant B) with and without fairness, instead of the phases")
	f.IntVar(&scen.fairnessTasks, "fairness-tasks", bench.DefaultFairnessATasks, "tenant A's tasks in the fairness scenario")
	f.IntVar(&scen.fairnessBatch, "fairness-b-batch", bench.DefaultFairnessBBatch, "size of tenant B's submission batches (up to 32 go to the orchestrators directly; larger ones queue behind A's submissions not yet taken in)")
	f.Float64Var(&scen.fairnessCapacity, "fairness-capacity", bench.DefaultFairnessCapacity, "executor capacity in the fairness scenario")
	f.DurationVar(&scen.fairnessHandler, "fairness-handler-time", bench.DefaultFairnessHandlerTime, "time the fairness scenario's handler takes per task (negative: a no-op); with --fairness-capacity it makes the executor the bottleneck, so A's backlog waits as ready tasks")
	f.BoolVar(&scen.adaptive, "adaptive", false, "run the adaptive concurrency scenario (a downstream answering 429 beyond 20 calls) with an adaptive and a fixed limit, instead of the phases")
	f.IntVar(&scen.adaptiveTasks, "adaptive-tasks", bench.DefaultAdaptiveTasks, "tasks in the adaptive scenario")
	f.DurationVar(&scen.adaptiveCall, "adaptive-call-time", bench.DefaultDownstreamCall, "how long one call to the adaptive scenario's downstream takes")
	f.IntVar(&scen.adaptiveRows, "adaptive-rows", 60, "most rows of the adaptive limit's curve printed (neighbouring samples merged; 0: every sample; -o json has them all)")
	cmd.AddCommand(benchShardsCmd(g))
	cmd.AddCommand(benchProducerCmd(g))
	return cmd
}

// printWork prints what the orchestrators did during phase p, and any task
// that ran or succeeded more than once.
func printWork(g *globals, p bench.Phase) {
	w := p.Work
	fmt.Fprintf(g.stdout, "\norchestrators during %s: %.2f task reads and %.2f writes per task", p.Name, w.ReadsPerTask, w.WritesPerTask)
	if w.AverageBatch > 0 {
		fmt.Fprintf(g.stdout, " (%.0f%% in atomic batches of %.1f on average)", 100*w.BatchedShare, w.AverageBatch)
	}
	if len(w.WriteShare) > 1 {
		fmt.Fprint(g.stdout, "; writes by orchestrator")
		for i, share := range w.WriteShare {
			fmt.Fprintf(g.stdout, " %d: %.0f%%", i+1, 100*share)
		}
	}
	consumers := make([]string, 0, len(w.Redelivered))
	for c := range w.Redelivered {
		consumers = append(consumers, c)
	}
	sort.Strings(consumers)
	fmt.Fprint(g.stdout, "; redelivered:")
	if len(consumers) == 0 {
		fmt.Fprint(g.stdout, " none")
	}
	for _, c := range consumers {
		fmt.Fprintf(g.stdout, " %s %d", c, w.Redelivered[c])
	}
	fmt.Fprintln(g.stdout)
	if p.DuplicateStarts > 0 || p.DuplicateSuccesses > 0 {
		fmt.Fprintf(g.stdout, "tasks run again: %d, succeeded again: %d\n", p.DuplicateStarts, p.DuplicateSuccesses)
	}
}

func benchShardsCmd(g *globals) *cobra.Command {
	var cfg bench.ShardsConfig
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "Measure dynamic sharding: register, run and fan in N no-op shards",
		Long: `Runs one shardable job per --sizes entry, each on a fresh embedded server:
its planner returns N no-op shards, an aggregator reads every outcome.
Reports, from the parent's history, the time to register the shard tasks,
to run and count them all (fan-in), and to aggregate; and the orchestrator's
task-record reads per shard, which stay constant when completing a shard
does not read its siblings.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			cfg.Logger = &log
			runs, err := bench.Shards(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(runs)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "shards	register s	fan-in s	shards/s	aggregate s	total s	reads/shard	")
			for _, r := range runs {
				fmt.Fprintf(w, "%d	%.2f	%.2f	%.0f	%.2f	%.2f	%.2f	\n", r.Shards, r.Register.Seconds(), r.FanIn.Seconds(),
					r.ShardsPerSec, r.Aggregate.Seconds(), r.Total.Seconds(), r.ReadsPerShard)
			}
			return w.Flush()
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&cfg.Sizes, "sizes", []int{10_000, 100_000}, "shard counts, one job each")
	f.IntVar(&cfg.MaxParallel, "max-parallel", 0, "max_parallel_shards of the jobs (0: no limit)")
	f.Float64Var(&cfg.Capacity, "capacity", 512, "executor capacity")
	return cmd
}

// writeAllocProfile writes the process's allocation profile to path; a
// failure is reported on standard error (the bench's figures stand).
func writeAllocProfile(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "memprofile: %v\n", err)
	}
}

// traffic formats a server's traffic per task or job.
func traffic(t *bench.TrafficPer) string {
	return fmt.Sprintf("%.1f messages in, %.1f out (%.0f and %.0f payload bytes); %.1f in all",
		t.InMsgs, t.OutMsgs, t.InBytes, t.OutBytes, t.InMsgs+t.OutMsgs)
}

// scenarios are the bench command's --fairness and --adaptive choices.
type scenarios struct {
	fairness, adaptive           bool
	fairnessTasks, adaptiveTasks int
	adaptiveCall                 time.Duration
	fairnessBatch                int
	fairnessCapacity             float64
	fairnessHandler              time.Duration
	adaptiveRows                 int
}

// scenarioResult is what --fairness and --adaptive print with -o json.
type scenarioResult struct {
	Fairness *bench.FairnessResult `json:"fairness,omitempty"`
	Adaptive *bench.AdaptiveResult `json:"adaptive,omitempty"`
}

// runScenarios runs and prints the scenarios chosen, on the bench's target.
func (g *globals) runScenarios(cmd *cobra.Command, cfg bench.Config, scen scenarios) error {
	ctx := cmd.Context()
	var res scenarioResult
	if scen.fairness {
		r, err := bench.Fairness(ctx, bench.FairnessConfig{URL: cfg.URL, NATSOptions: cfg.NATSOptions,
			ATasks: scen.fairnessTasks, BBatch: scen.fairnessBatch,
			Capacity: scen.fairnessCapacity, HandlerTime: scen.fairnessHandler, Logger: cfg.Logger})
		if err != nil {
			return err
		}
		res.Fairness = &r
	}
	if scen.adaptive {
		r, err := bench.Adaptive(ctx, bench.AdaptiveConfig{URL: cfg.URL, NATSOptions: cfg.NATSOptions,
			Tasks: scen.adaptiveTasks, CallTime: scen.adaptiveCall, Logger: cfg.Logger})
		if err != nil {
			return err
		}
		res.Adaptive = &r
	}
	if g.jsonOutput() {
		return g.printJSON(res)
	}
	if r := res.Fairness; r != nil {
		if err := printFairness(g, r); err != nil {
			return err
		}
	}
	if r := res.Adaptive; r != nil {
		if res.Fairness != nil {
			fmt.Fprintln(g.stdout)
		}
		if err := printAdaptive(g, r, scen.adaptiveRows); err != nil {
			return err
		}
	}
	return nil
}

func printFairness(g *globals, r *bench.FairnessResult) error {
	with, without := r.With, r.Without
	handler := "no-op"
	if with.HandlerTime > 0 {
		handler = with.HandlerTime.String()
	}
	fmt.Fprintf(g.stdout, "fairness: tenant A submitted %d tasks (fairness_key A), then, once the orchestrator had taken them in, tenant B %d at the same priority (fairness_key B) in batches of %d; handler %s, executor capacity %.0f\n",
		with.ATasks, with.BTasks, with.BBatch, handler, with.Capacity)
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\twith fairness (window ≤ %d, following the drain)\twithout (window %d)\t\n", with.Window, without.Window)
	row := func(name string, f func(bench.FairnessRun) string) {
		fmt.Fprintf(w, "%s\t%s\t%s\t\n", name, f(with), f(without))
	}
	row("A's tasks not yet done at B's submission", func(x bench.FairnessRun) string { return fmt.Sprint(x.ABacklog) })
	row("  of which submissions not taken in (AX_SUBMIT)", func(x bench.FairnessRun) string { return fmt.Sprint(x.ASubmitQueued) })
	row("  queued for fairness in the orchestrator", func(x bench.FairnessRun) string { return fmt.Sprint(x.AFairQueued) })
	row("  dispatches not yet acknowledged (AX_READY)", func(x bench.FairnessRun) string { return fmt.Sprint(x.AReadyPending) })
	row("B submit→start p50", func(x bench.FairnessRun) string { return ms(x.BSubmitToStart.P50) })
	row("B submit→start p99", func(x bench.FairnessRun) string { return ms(x.BSubmitToStart.P99) })
	row("B submit→start max", func(x bench.FairnessRun) string { return ms(x.BSubmitToStart.Max) })
	row("B submitted → all of B succeeded", func(x bench.FairnessRun) string { return ms(x.BAllDone) })
	row("A submit→start p50", func(x bench.FairnessRun) string { return ms(x.ASubmitToStart.P50) })
	row("A's run (first submit → last success)", func(x bench.FairnessRun) string { return fmt.Sprintf("%.2fs", x.AElapsed.Seconds()) })
	row("A's throughput", func(x bench.FairnessRun) string { return fmt.Sprintf("%.0f tasks/s", x.ATasksPerSec) })
	row("tasks succeeded (A + B)", func(x bench.FairnessRun) string { return fmt.Sprintf("%d + %d", x.ASucceeded, x.BSucceeded) })
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "A's throughput cost of fairness: %.1f%%\n", r.ThroughputCost)
	return nil
}

func printAdaptive(g *globals, r *bench.AdaptiveResult, rows int) error {
	a, f := r.Adaptive, r.Fixed
	fmt.Fprintf(g.stdout, "adaptive concurrency: %d tasks under key %s (concurrency %d); the downstream serves %d calls at once, %s each (ideal %.0f/s), and answers 429 (retry after %s) beyond; circuit breaker and retry budget off\n",
		a.Tasks, bench.DownstreamKey, r.Concurrency, r.DownstreamCapacity, r.CallTime, r.Ideal, r.Backoff)
	fmt.Fprintln(g.stdout, "\nthe adaptive limit's curve:")
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "t\tlimit\tin use\tdone/s\t429/s\t")
	stride := 1
	if rows > 0 && len(a.Samples) > rows {
		stride = (len(a.Samples) + rows - 1) / rows
	}
	for i := 0; i < len(a.Samples); i += stride {
		group := a.Samples[i:min(i+stride, len(a.Samples))]
		// Rates averaged over the merged samples; limit and slots as at the
		// group's last sample.
		var done, rejected float64
		for _, s := range group {
			done += s.DonePerSec
			rejected += s.RejectedPerSec
		}
		s := group[len(group)-1]
		n := float64(len(group))
		fmt.Fprintf(w, "%.2fs\t%.1f\t%d\t%.0f\t%.0f\t\n", s.T.Seconds(), s.Limit, s.InUse, done/n, rejected/n)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if stride > 1 {
		fmt.Fprintf(g.stdout, "(%d samples, %d merged per row; -o json has every one)\n", len(a.Samples), stride)
	}
	fmt.Fprintln(g.stdout)
	w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\tadaptive (≤ %d)\tfixed %d\t\n", r.Concurrency, r.Concurrency)
	row := func(name string, fn func(bench.AdaptiveRun) string) {
		fmt.Fprintf(w, "%s\t%s\t%s\t\n", name, fn(a), fn(f))
	}
	row("limit, median over the second half (busy samples)", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%.1f", x.LimitMedian) })
	row("throughput", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%.0f tasks/s", x.TasksPerSec) })
	row("of the downstream's capacity", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%.0f%%", 100*x.TasksPerSec/r.Ideal) })
	row("429s per task", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%.2f (%d)", x.RejectedPerTask, x.Rejected) })
	row("elapsed (first submit → last success)", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%.2fs", x.Elapsed.Seconds()) })
	row("most calls at the downstream at once", func(x bench.AdaptiveRun) string { return fmt.Sprint(x.DownstreamPeak) })
	row("tasks succeeded", func(x bench.AdaptiveRun) string { return fmt.Sprintf("%d of %d", x.Succeeded, x.Tasks) })
	return w.Flush()
}
