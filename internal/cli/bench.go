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
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure no-op tasks end to end (submit → ready → executor → completed → succeeded)",
		Long: `Runs an orchestrator (or --orchestrators of them, sharing the work as
separate processes would) and an executor in this process against an
embedded NATS server (or --nats with --embedded=false) and measures two phases:
  throughput: --tasks no-op tasks submitted as fast as possible; tasks/s from
              the first submit to the last success;
  steady:     --rate tasks/s for --duration; latency percentiles of
              submit→start (handler entered) and submit→succeeded (recorded).`,
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
			}
			for _, p := range phases {
				printWork(g, p)
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
	f.BoolVar(&cfg.ReadyInMemory, "ready-in-memory", false, "keep AX_READY (the dispatches) in memory, as `ax orchestrator --ready-in-memory`")
	f.BoolVar(&cfg.GroupCommit, "group-commit", false, "turn group commit on, as `ax topology --group-commit` (batched record writes and submissions)")
	f.BoolVar(&cfg.Cluster, "cluster", false, "run three clustered embedded servers and R3 streams (with --sync-always: every node fsyncs every write)")
	f.IntVar(&cfg.Orchestrators, "orchestrators", 1, "orchestrators to run, each on its own connection, sharing the work as that many `ax orchestrator` processes (with --cluster: spread over the servers)")
	f.BoolVar(&embedded, "embedded", true, "use an embedded server (false: the --nats server)")
	f.IntVar(&cfg.Backlog, "backlog", 0, "backlog probe: submit this many p5 tasks at once, then a p0, and report the p0's submit→start (0 skips it)")
	f.IntVar(&cfg.Bare, "bare", 20000, "jobs for the bare JetStream reference loop on the same server (streams AX_BENCH_BARE_IN/OUT, removed after), printed beside AX's throughput (0 skips it)")
	f.IntVar(&cfg.Delayed, "delayed", 200, "delayed tasks (run_at 2s ahead) mixed into the steady phase; their start lateness is reported")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole bench process (server, orchestrator, executor) to this file")
	f.StringVar(&memProfile, "memprofile", "", "write an allocation profile of the whole bench process to this file when it ends (go tool pprof -sample_index=alloc_space)")
	f.StringVar(&dsn, "mysql-dsn", "", "also run the MySQL audit mirror and report its rate and lag (default: env AX_MYSQL_DSN)")
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
