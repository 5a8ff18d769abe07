// Command peers measures River (PostgreSQL) and Asynq (Redis) with the
// workload of `ax bench`, so that AX's figures can be read beside its
// peers' measured on the same machine:
//
//	throughput: --tasks no-op jobs submitted as fast as possible (each
//	            system's batch or pipelined way); jobs/s from the first
//	            submission to the last stored completion;
//	steady:     --rate jobs/s for --duration; percentiles of submit→start
//	            (handler entered) and submit→done.
//
// Each run works in a database of its own (a fresh PostgreSQL database, an
// empty Redis database), removed after, and prints the server settings that
// decide what an acknowledged job survives.
//
// It is a module of its own so that AX's module depends on neither peer.
// Run it from this directory: go run . --system all
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"text/tabwriter"
	"time"
)

func main() {
	var (
		system  = flag.String("system", "all", "river, asynq or all")
		asJSON  = flag.Bool("json", false, "print the results as JSON (a list, one entry per system)")
		timeout = flag.Duration("timeout", 10*time.Minute, "give up after this long")
		cfg     Config
		ropt    RiverOptions
		aopt    AsynqOptions
		maxConn int
	)
	flag.IntVar(&cfg.Tasks, "tasks", 20000, "jobs in the throughput phase (0 skips it)")
	flag.IntVar(&cfg.Rate, "rate", 1000, "jobs/s in the steady phase (0 skips it)")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "length of the steady phase")
	flag.IntVar(&cfg.Workers, "workers", 512, "jobs run at once (River MaxWorkers, Asynq Concurrency); `ax bench --capacity` defaults to 512")
	flag.StringVar(&ropt.URL, "pg", "postgres://postgres@127.0.0.1:5432/", "PostgreSQL server (a database ax_peers_* is created through the postgres database, dropped after)")
	flag.DurationVar(&ropt.FetchCooldown, "fetch-cooldown", 10*time.Millisecond, "River FetchCooldown (River's default: 100ms)")
	flag.IntVar(&maxConn, "pg-conns", 16, "connections in River's pgx pool")
	flag.StringVar(&aopt.Addr, "redis", "127.0.0.1:6379", "Redis server (an empty database 1..15 is used, its keys deleted after)")
	flag.DurationVar(&aopt.CheckInterval, "check-interval", 10*time.Millisecond, "Asynq TaskCheckInterval (Asynq's default: 1s)")
	flag.IntVar(&aopt.Enqueuers, "enqueuers", 16, "Asynq enqueues at once (it has no batch enqueue)")
	flag.Parse()
	ropt.MaxConns = int32(maxConn)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, os.Stdout, *system, *asJSON, cfg, ropt, aopt); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// run measures the chosen systems and prints their results to w.
func run(ctx context.Context, w io.Writer, system string, asJSON bool, cfg Config, ropt RiverOptions, aopt AsynqOptions) error {
	var systems []string
	switch system {
	case "all":
		systems = []string{"river", "asynq"}
	case "river", "asynq":
		systems = []string{system}
	default:
		return fmt.Errorf("--system %q: want river, asynq or all", system)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var results []Result
	for _, s := range systems {
		var res Result
		var err error
		if s == "river" {
			res, err = runRiver(ctx, cfg, ropt, log)
		} else {
			res, err = runAsynq(ctx, cfg, aopt)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		results = append(results, res)
		if !asJSON {
			if err := printResult(w, res); err != nil {
				return err
			}
		}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// printResult prints res as `ax bench` prints its phases, under a header
// that says what the system guarantees and how it was tuned.
func printResult(w io.Writer, res Result) error {
	fmt.Fprintf(w, "%s %s on %s (", res.System, res.Version, res.Durability.Server)
	first := true
	for _, k := range []string{"synchronous_commit", "fsync", "appendonly", "appendfsync", "save"} {
		v, ok := res.Durability.Settings[k]
		if !ok {
			continue
		}
		if !first {
			fmt.Fprint(w, ", ")
		}
		first = false
		fmt.Fprintf(w, "%s=%q", k, v)
	}
	fmt.Fprintf(w, "): %s\n%s\n\n", res.Durability.Summary, res.Tuning)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttasks\tseconds\ttasks/s\tstart p50\tp90\tp99\tmax\tdone p50\tp90\tp99\tmax\t")
	for _, p := range res.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Name, p.Tasks, p.Elapsed.Seconds(), p.TasksPerSec,
			ms(p.SubmitToStart.P50), ms(p.SubmitToStart.P90), ms(p.SubmitToStart.P99), ms(p.SubmitToStart.Max),
			ms(p.SubmitToDone.P50), ms(p.SubmitToDone.P90), ms(p.SubmitToDone.P99), ms(p.SubmitToDone.Max))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, n := range res.Notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintf(w, "checked: %s\n\n", res.Checked)
	return nil
}

// moduleVersion returns the version of module path this binary was built
// with.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(unknown version)"
}
