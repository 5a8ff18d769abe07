package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/health"
	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
)

// devContext is the nats context ax dev saves with its server's URL.
const devContext = "ax-dev"

func devCmd(g *globals) *cobra.Command {
	var (
		storeDir string
		port     int
		exit     bool
		dsn      string
		console  string
		metrics  string
		saveCtx  string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the demo: embedded NATS, an orchestrator, two executors and a workload to watch",
		Long: `Starts an embedded NATS server with JetStream (store in --store, kept across
runs), one orchestrator and two executors (capabilities "default" and "gpu"),
then submits the demo workload: a DAG, tasks on all six priorities, a flaky
task that fails twice then succeeds, one that exhausts its retries and lands
in the dead-letter queue (its dependent is cancelled), and one whose
capability no executor has (it waits, visibly, and is cancelled at the end).
A progress line shows tasks per state; a summary follows. The server keeps
running afterwards so you can inspect tasks with ax status; Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), g, storeDir, port, exit, mysqlDSNOrEnv(dsn), console, metrics, saveCtx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeDir, "store", ".ax-dev", "JetStream store directory (kept across runs)")
	f.IntVar(&port, "port", defaultNATSPort(), "NATS port: the one every ax command and the SDK connect to by default (a free one is used if it is taken: then give the others --context "+devContext+")")
	f.StringVar(&saveCtx, "save-context", devContext, "save the server's URL as this nats context (a name, or a path ending in .json; \"off\" for none), for --context / NATS_CONTEXT of the other commands and the nats CLI")
	f.BoolVar(&exit, "exit", false, "exit after the summary instead of keeping the server up")
	f.StringVar(&console, "console-addr", defaultConsoleAddr, "serve the web console here (a free port if taken; \"off\" for none)")
	f.StringVar(&metrics, "metrics-addr", defaultDevMetricsAddr, "serve Prometheus metrics here at /metrics (a free port if taken; \"off\" for none)")
	f.StringVar(&dsn, "mysql-dsn", "", "also mirror every event into MySQL (default: env "+envMySQLDSN+"); try ax audit afterwards")
	return cmd
}

func runDev(ctx context.Context, g *globals, storeDir string, port int, exit bool, dsn, consoleAddr, metricsAddr, saveCtx string) error {
	log := g.logger()
	if g.logLevel == "info" {
		log = log.Level(zerolog.WarnLevel) // keep the progress display readable
	}
	storeDir, _ = filepath.Abs(storeDir)
	srv, err := natsserver.Start(natsserver.Config{StoreDir: filepath.Join(storeDir, "nats"), Port: port})
	if err != nil && port != 0 {
		srv, err = natsserver.Start(natsserver.Config{StoreDir: filepath.Join(storeDir, "nats")})
	}
	if err != nil {
		return err
	}
	defer srv.Stop()
	url := srv.URL()
	fmt.Fprintf(g.stdout, "AX dev: embedded NATS with JetStream at %s (store %s)\n", url, storeDir)
	connectFlag := devConnectHint(g, url, port, saveCtx)

	conns := []*nats.Conn{}
	connect := func(name string) (*nats.Conn, error) {
		nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1))
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()

	onc, err := connect("ax-dev-orchestrator")
	if err != nil {
		return err
	}
	obs, err := startDevObservability(ctx, g, metricsAddr)
	if err != nil {
		return err
	}
	defer obs.stop()
	obs.health.Add("nats", health.NATS(onc))
	devStarted := obs.health.Starting("orchestrator and executors")
	ocfg := orchestrator.Config{NodeID: "orchestrator-dev", Logger: slogger(log), TracerProvider: obs.tp}
	watch := orchestratorMetrics(obs.reg, &ocfg)
	orch, err := orchestrator.New(onc, ocfg)
	if err != nil {
		return err
	}
	watch(orch)
	if err := orch.Start(ctx); err != nil {
		return err
	}
	defer stopWithin(10*time.Second, orch.Stop)
	if dsn != "" {
		stopMirror, err := startMirror(ctx, onc, dsn, log, obs.reg)
		if err != nil {
			return err
		}
		defer stopWithin(10*time.Second, stopMirror)
		fmt.Fprintln(g.stdout, "  mirroring every event into MySQL (ax audit … --mysql-dsn to query)")
	}

	for _, ec := range []executor.Config{
		{ID: "executor-cpu", Capabilities: []string{demo.CapCPU}, Capacity: 4},
		{ID: "executor-gpu", Capabilities: []string{demo.CapGPU}, Capacity: 2},
	} {
		nc, err := connect("ax-dev-" + ec.ID)
		if err != nil {
			return err
		}
		ec.Logger = slogger(log)
		watch := obs.executorHooks(&ec)
		ex, err := executor.New(nc, ec)
		if err != nil {
			return err
		}
		watch(ex)
		demo.Register(ex)
		if err := ex.Start(ctx); err != nil {
			return err
		}
		defer stopWithin(10*time.Second, ex.Stop)
		fmt.Fprintf(g.stdout, "  executor %-13s capabilities %v, capacity %.0f\n", ec.ID, ec.Capabilities, ec.Capacity)
	}
	devStarted()

	cnc, err := connect("ax-dev-client")
	if err != nil {
		return err
	}
	client, err := sdk.New(ctx, cnc)
	if err != nil {
		return err
	}
	if consoleURL, stopConsole, err := startDevConsole(ctx, client, consoleAddr, dsn, log); err != nil {
		return err
	} else if stopConsole != nil {
		defer stopConsole()
		fmt.Fprintf(g.stdout, "  web console at %s\n", consoleURL)
	}
	js, _ := jetstream.New(cnc)
	run := "demo-" + strings.ToLower(nuid.Next()[16:])
	w := demo.NewWorkload(run)
	specs := w.All()
	ids := make([]string, len(specs))
	for i, s := range specs {
		ids[i] = s.ID
	}
	tr, err := demo.Track(ctx, js, ids)
	if err != nil {
		return err
	}
	defer tr.Close()
	if _, err := client.SubmitGraph(ctx, w.Graph); err != nil {
		return err
	}
	if _, err := client.SubmitMany(ctx, w.Single); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "Submitted %d tasks (run %s): a 7-task DAG, 24 tasks over p0..p5 on two capabilities,\n"+
		"a flaky task, a task bound for the dead-letter queue, one nobody can run, and a job\n"+
		"sharded at run time into 40 shards (8 at a time) whose results are aggregated.\n\n", len(specs), run)

	start := time.Now()
	tty := isatty.IsTerminal(os.Stdout.Fd())
	last := ""
	show := func(final bool) {
		line := demo.ProgressLine(time.Since(start), tr.Counts())
		if tty {
			fmt.Fprintf(g.stdout, "\r\033[K%s", line)
			if final {
				fmt.Fprintln(g.stdout)
			}
			return
		}
		if body := line[strings.Index(line, "]")+1:]; body != last || final {
			fmt.Fprintln(g.stdout, line)
			last = body
		}
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	cancelled := false
	for !tr.Done() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(g.stdout)
			return nil
		case <-tick.C:
		case <-tr.Changed():
		}
		show(false)
		if !cancelled && tr.Done(w.Unserved) {
			cancelled = true
			if _, err := client.Cancel(ctx, w.Unserved, "demo over: no executor has capability "+demo.CapUnserved); err != nil {
				return fmt.Errorf("cancel %s: %w", w.Unserved, err)
			}
		}
	}
	show(true)
	fmt.Fprintf(g.stdout, "\nAll %d tasks ended in %.1fs:\n\n", len(specs), time.Since(start).Seconds())
	demo.PrintSummary(g.stdout, tr, specs)
	fmt.Fprintf(g.stdout, `
Inspect (while this keeps running):
  ax status %[1]s%[4]s    # a retried task and its history
  ax status %[2]s%[4]s   # the dead-lettered task
  ax status %[3]s%[4]s    # the sharded job: phases and shard counts
  ax workers%[4]s                # the executors and what runs on each
  ax dlq list%[4]s
  ax dlq redrive %[2]s%[4]s
`, run+"-flaky", run+"-export", run+"-split", connectFlag)
	if exit {
		return nil
	}
	fmt.Fprintln(g.stdout, "\nThe server, orchestrator and executors keep running; Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}

// stopWithin calls stop with a deadline (for deferred shutdowns).
func stopWithin(d time.Duration, stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "ax: stop:", err)
	}
}

// defaultNATSPort is DefaultNATSURL's port: where ax dev and ax server
// listen by default, and every other command and the SDK connect.
func defaultNATSPort() int {
	_, p, _ := strings.Cut(strings.TrimPrefix(DefaultNATSURL, "nats://"), ":")
	n, _ := strconv.Atoi(p)
	return n
}

// devConnectHint saves ax dev's server URL as a nats context (saveCtx, a
// name or a .json path; "off" for none), says how the other commands reach
// the server, and returns the flag to add to them ("" when their default
// does: the server listens on DefaultNATSURL).
func devConnectHint(g *globals, url string, port int, saveCtx string) string {
	flag := ""
	if url != DefaultNATSURL {
		flag = " --nats " + url
	}
	if saveCtx != "" && saveCtx != "off" {
		s := natsconn.Settings{}
		s.ApplyEnv(os.Getenv)
		path, err := natsconn.ContextPath(s.ContextDir, saveCtx)
		if err == nil {
			err = natsconn.SaveContext(path, "the server of ax dev (saved by ax dev)", url)
		}
		if err != nil {
			fmt.Fprintf(g.stderr, "ax dev: nats context not saved: %v\n", err)
		} else {
			fmt.Fprintf(g.stdout, "  saved as nats context %s (%s): --context %s or NATS_CONTEXT=%s reaches it\n", saveCtx, path, saveCtx, saveCtx)
			if flag != "" {
				flag = " --context " + saveCtx
			}
		}
	}
	if url != DefaultNATSURL && port == defaultNATSPort() {
		fmt.Fprintf(g.stdout, "  NOTE: port %d is taken (another NATS server?), so this demo listens on %s: the other ax commands and the SDK\n"+
			"  connect to %s by default and would reach that other server; give them%s.\n", port, url, DefaultNATSURL, flag)
	}
	return flag
}
