//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// clusterSettings size TestCluster; the environment overrides them.
type clusterSettings struct {
	tasks      int           // submitted tasks (shards come on top)
	waves      int           // submission batches
	submitSpan time.Duration // the waves are spread over this
	faultSpan  time.Duration // faults are injected for this long
	faults     bool
	syncAlways bool
	// quiet: with tasks unfinished and no new event in AX_TASKS for this
	// long after healing, the rest are stuck (2.5 times the reconciler's
	// default interval of a minute). settle bounds the whole wait.
	quiet, settle time.Duration
	orchFlags     []string
}

func clusterSettingsFromEnv(t *testing.T) clusterSettings {
	s := clusterSettings{tasks: 10_000, submitSpan: 70 * time.Second, faultSpan: 80 * time.Second,
		faults: true, quiet: 150 * time.Second, settle: 5 * time.Minute}
	if os.Getenv("AX_CLUSTER_LONG") == "1" {
		s.tasks, s.submitSpan, s.faultSpan = 20_000, 9*time.Minute, 10*time.Minute
	}
	envInt := func(key string, v *int) {
		if e := os.Getenv(key); e != "" {
			n, err := strconv.Atoi(e)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			*v = n
		}
	}
	envDur := func(key string, v *time.Duration) {
		if e := os.Getenv(key); e != "" {
			d, err := time.ParseDuration(e)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			*v = d
		}
	}
	envInt("AX_CLUSTER_TASKS", &s.tasks)
	envDur("AX_CLUSTER_SUBMIT_SPAN", &s.submitSpan)
	envDur("AX_CLUSTER_FAULT_SPAN", &s.faultSpan)
	envDur("AX_CLUSTER_QUIET", &s.quiet)
	envDur("AX_CLUSTER_SETTLE", &s.settle)
	s.faults = os.Getenv("AX_CLUSTER_FAULTS") != "0"
	s.syncAlways = os.Getenv("AX_CLUSTER_SYNC_ALWAYS") == "1"
	s.waves = max(3, int(s.submitSpan/(2*time.Second)))
	s.orchFlags = strings.Fields(os.Getenv("AX_CLUSTER_ORCH_FLAGS"))
	return s
}

// TestCluster runs AX on a real 3-node JetStream cluster (R3 streams): two
// orchestrators, three executors and the MySQL mirror, a workload of at
// least 10,000 tasks (chains, fan-ins of 20, sharded jobs, flaky and
// always-failing handlers, late dependents, plain tasks) submitted while
// nodes, orchestrators and executors are killed with -9 and restarted, a
// node is paused with SIGSTOP, and one node at a time is partitioned from
// the others. Then it heals everything, waits until every task is
// terminal (or nothing moves any more) and checks every history, the dead
// letters and the mirror. It prints the figures: tasks, faults, stuck
// tasks, the longest stall and the reconciler's repairs per reason.
//
// Knobs: AX_CLUSTER_LONG=1 (20,000 tasks, 10 minutes of faults),
// AX_CLUSTER_FAULTS=0 (no faults: the baseline), AX_CLUSTER_TASKS,
// AX_CLUSTER_SUBMIT_SPAN, AX_CLUSTER_FAULT_SPAN, AX_CLUSTER_QUIET,
// AX_CLUSTER_SETTLE, AX_CLUSTER_SYNC_ALWAYS=1 (fsync every write),
// AX_CLUSTER_ORCH_FLAGS (extra orchestrator flags), and the package's
// AX_E2E_SEED, AX_E2E_LOG_LEVEL, AX_E2E_LOGDIR.
func TestCluster(t *testing.T) {
	cfg := clusterSettingsFromEnv(t)
	c := newCluster(t)
	testStart := time.Now()
	rng := newRand(t)
	w := newClusterWorkload(rng, cfg.tasks, cfg.waves)
	t.Logf("workload: %s", w.summary())
	t.Logf("settings: submit over %s, faults=%v for %s, sync_interval always=%v, quiet %s, settle bound %s",
		cfg.submitSpan, cfg.faults, cfg.faultSpan, cfg.syncAlways, cfg.quiet, cfg.settle)
	dsn, db := mirrortest.DB(t)

	nc := startNATSCluster(t, c, 3, cfg.syncAlways)
	r := newClusterRig(t, c, nc, rng)
	// Registered after the database's cleanup, so it runs before it: no
	// process outlives the proxies or the database it uses.
	t.Cleanup(r.killAll)
	r.logf("3 nats-server nodes healthy: %s", nc.URLs(0))
	// The second orchestrator starts once the first created the topology:
	// two processes creating the same R3 stream at the same moment both get
	// no reply from nats-server 2.15 (each waits out its timeout per stream).
	r.startOrchestrator(0, append(clusterOrchFlags(), cfg.orchFlags...))
	js0 := r.jetStream()
	r.waitTopology(js0, 90*time.Second)
	r.logf("AX topology created with 3 replicas")
	r.startOrchestrator(1, append(clusterOrchFlags(), cfg.orchFlags...))
	r.startMirror(dsn)
	r.startWorkers(3)
	ncs, clients := r.connect()
	for _, nc := range ncs {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		r.readers = append(r.readers, js)
	}
	sub := newSubmitter(t, clients)
	r.warmUp(sub)

	stopScrape := make(chan struct{})
	scrapeDone := make(chan struct{})
	go func() { r.counter.loop(stopScrape); close(scrapeDone) }()
	defer func() { close(stopScrape); <-scrapeDone }()

	probe := startLeaderProbe(r.readers)
	subDone := make(chan struct{})
	go func() { sub.run(w, cfg.submitSpan); close(subDone) }()
	phaseStart := time.Now()
	if cfg.faults {
		r.injectFaults(phaseStart.Add(cfg.faultSpan))
	}
	for waiting := true; waiting; {
		select {
		case <-subDone:
			waiting = false
		case <-time.After(time.Second):
			r.supervise()
		}
	}
	r.logf("workload submitted: %d of %d tasks acknowledged (%d retried calls)", len(sub.ackedIDs()), len(w.tasks), sub.retried())
	r.healAll()
	healed := time.Now()
	pf := probe.figures(phaseStart, healed)
	nFaults, faultKinds := r.faultSummary()
	r.logf("healed after %s of faults (%d: %s)", healed.Sub(phaseStart).Round(time.Second), nFaults, faultKinds)

	acked := sub.ackedIDs()
	settled, _ := r.waitSettled(w, acked, cfg)
	settledAt := time.Now()

	var all map[string][]store.Revisioned
	r.read("the task histories", func(ctx context.Context, js jetstream.JetStream) (err error) {
		all, err = histories(ctx, js)
		return err
	})
	var dlq map[string]int
	r.read("the dead letters", func(ctx context.Context, js jetstream.JetStream) (err error) {
		dlq, err = deadLetterCounts(ctx, js)
		return err
	})
	f := checkClusterHistories(t, w, acked, all, dlq, settledAt, pf)
	peaks := checkKeyConcurrency(t, all, clusterKeyLimit)
	checkMirror(t, r, db, all, 2*time.Minute)
	r.counter.scrapeAll()

	if bad := r.topologyReplicas(r.readers[0]); len(bad) > 0 {
		t.Errorf("streams not at 3 replicas at the end: %s", strings.Join(bad, ", "))
	}
	r.checkReplicasKept()
	for _, p := range sub.problems {
		t.Errorf("submission: %s", p)
	}
	for name, n := range r.crashes {
		t.Errorf("%s exited unexpectedly %d times (restarted each time)", name, n)
	}
	if len(f.missing) > 0 {
		var b strings.Builder
		for i, id := range f.missing {
			if i == 20 {
				fmt.Fprintf(&b, "  … %d more\n", len(f.missing)-20)
				break
			}
			fmt.Fprintf(&b, "  %s: %s\n", id, whyMissing(clients, id))
		}
		t.Errorf("%d acknowledged submissions have no task:\n%s", len(f.missing), b.String())
	}
	stuckLine := strconv.Itoa(len(f.stuck))
	if len(f.stuck) > 0 {
		byState, report := describeStuck(f.stuck, all)
		stuckLine = fmt.Sprintf("%d %v", len(f.stuck), byState)
		t.Errorf("%d tasks stuck (not terminal %s after healing, AX_TASKS %s):\n%s  %s", len(f.stuck),
			settledAt.Sub(healed).Round(time.Second), settled, report, r.dumpGoroutines())
	}

	t.Logf(`cluster run figures:
  tasks:          %d submitted and acknowledged (%d planned) + %d shards = %d; %d events; final states %v
  faults:         %d (%s)
  stuck:          %s
  missing:        %d acknowledged submissions without a task
  violations:     %d history invariant violations
  key limits:     most attempts of one tenant at once %v (limit %d)
  longest stall:  %s (not counting waits for unfinished upstreams or shards, or for a slot of a concurrency key)
  net of outages: %s (the longest stall less the times a probed stream was out)
  and consumers:  %s (… and, for a ready task, less the times its level's ready consumer had no leader)
  store outage:   %s (the longest each stream went without answering a leader read, probed every %s through every node, until healed)
  ready outage:   %s (the longest each level's ready consumer went without its leader answering)
  probe reads:    %d; refused %d
  slot wait:      %s (the longest wait for a slot of a concurrency key)
  raw stall:      %s (any unfinished task without an event)
  by state:       %s
  top stalls:     %v
  repairs:        %s
  consumer restarts: %s
  takeovers:      %d; dead letters %d; crashes (unexpected exits) %v
  durations:      total %s; submission and faults %s; heal → settled %s (%s); %.0f tasks/s from the first submission to settled
  longest stall's history (%s):
%s
  longest net stall's history (%s):
%s`,
		f.tasks, len(w.tasks), f.shards, f.tasks+f.shards, f.events, f.states,
		nFaults, faultKinds,
		stuckLine, len(f.missing), f.violations, peaks, clusterKeyLimit,
		f.longest, f.longestNet, f.longestNetReady, pf.render(), probeEvery, pf.renderReady(), pf.reads, pf.refused, f.slotWait, f.longestRaw, f.stallsByState(), f.top,
		r.counter.render("ax_reconciler_repairs_total"), r.counter.render("ax_consumer_restarts_total"),
		f.takeovers, f.deadLeters, r.crashes,
		time.Since(testStart).Round(time.Second), healed.Sub(phaseStart).Round(time.Second),
		settledAt.Sub(healed).Round(time.Second), settled, float64(f.tasks+f.shards)/settledAt.Sub(phaseStart).Seconds(),
		f.longest.id, describe(all[f.longest.id]), f.longestNet.id, describe(all[f.longestNet.id]))
}

// warmUp runs one demo.noop and waits until it succeeded, so every part is
// known to be up before faults are injected. Calls go through the
// submitter's failover: right after the streams were created, a node may
// still answer "no responders".
func (r *clusterRig) warmUp(sub *submitter) {
	r.t.Helper()
	s, err := task.New(demo.TypeNoop, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	s.ID = warmUpPrefix + "cluster"
	if err := sub.try(time.Minute, func(ctx context.Context, cl *sdk.Client) error {
		_, err := cl.Submit(ctx, s)
		return err
	}); err != nil {
		r.t.Fatalf("warm-up: %v", err)
	}
	eventually(r.t, time.Minute, "the warm-up task to succeed", func() (bool, string) {
		var got *task.Task
		err := sub.try(opTimeout, func(ctx context.Context, cl *sdk.Client) (err error) {
			got, err = cl.Get(ctx, s.ID)
			return err
		})
		if err != nil {
			return false, err.Error()
		}
		return got.State == task.Succeeded, string(got.State)
	})
	r.logf("warm-up task done")
}

// whyMissing tells what the SDK says about an acknowledged id without a
// task (a rejection, or nothing).
func whyMissing(clients []*sdk.Client, id string) string {
	for _, cl := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := cl.Get(ctx, id)
		cancel()
		var rej *sdk.RejectedError
		switch {
		case errors.As(err, &rej):
			return "rejected: " + rej.Rejection.Reason
		case errors.Is(err, sdk.ErrNotFound):
			continue
		case err != nil:
			return err.Error()
		default:
			return "exists now: " + string(got.State)
		}
	}
	return "not found, no rejection"
}

// waitSettled polls the latest state of every task until all acknowledged
// tasks exist and every workload task is terminal, or until AX_TASKS has
// not grown for cfg.quiet, or cfg.settle passed. It returns how it ended
// and the last states read.
func (r *clusterRig) waitSettled(w *clusterWorkload, acked map[string]time.Time, cfg clusterSettings) (string, map[string]task.Task) {
	r.t.Helper()
	start := time.Now()
	var lastSeq uint64
	lastGrowth := start
	lastLog := start
	var states map[string]task.Task
	for {
		r.supervise()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		js := r.readers[r.readN%len(r.readers)]
		r.readN++
		s, err := latestStates(ctx, js)
		var seq uint64
		if err == nil {
			var st jetstream.Stream
			if st, err = js.Stream(ctx, subject.StreamTasks); err == nil {
				var info *jetstream.StreamInfo
				if info, err = st.Info(ctx); err == nil {
					seq = info.State.LastSeq
				}
			}
		}
		cancel()
		status := ""
		if err != nil {
			status = "read: " + err.Error()
		} else {
			states = s
			if seq != lastSeq {
				lastSeq, lastGrowth = seq, time.Now()
			}
			missing := 0
			for id := range acked {
				if _, ok := states[id]; !ok {
					missing++
				}
			}
			open := map[task.State]int{}
			unfinished := 0
			for id, st := range states {
				if isClusterTask(id) && !st.State.Terminal() {
					open[st.State]++
					unfinished++
				}
			}
			status = fmt.Sprintf("%d unfinished %v, %d acknowledged missing, AX_TASKS at %d", unfinished, open, missing, seq)
			if unfinished == 0 && missing == 0 {
				r.logf("all tasks terminal %s after healing (%s)", time.Since(start).Round(100*time.Millisecond), status)
				return "all terminal", states
			}
			if time.Since(lastGrowth) > cfg.quiet {
				r.logf("nothing moved for %s: %s", cfg.quiet, status)
				return fmt.Sprintf("no new event for %s", cfg.quiet), states
			}
		}
		if time.Since(start) > cfg.settle {
			r.logf("gave up after %s: %s", cfg.settle, status)
			return fmt.Sprintf("still moving after the %s bound", cfg.settle), states
		}
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			r.logf("settling: %s", status)
		}
		time.Sleep(2 * time.Second)
	}
}

// scrapeAll scrapes every process once more.
func (s *counterScraper) scrapeAll() {
	s.mu.Lock()
	var names []string
	for n := range s.addrs {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		s.scrape(n)
	}
}

// clusterKeyLimit is the cluster run's concurrency limit per tenant; its
// fair window is small, so that its backlogs queue for their turn.
const clusterKeyLimit = 24

// clusterOrchFlags are the orchestrators' key limit and fairness flags in
// the cluster run (restarts included: orchestrators keep their args).
func clusterOrchFlags() []string {
	return []string{"--key-limit", "tenant.*:concurrency=" + strconv.Itoa(clusterKeyLimit), "--fair-window", "64"}
}

// checkKeyConcurrency checks that no concurrency key ever had more than
// limit attempts at once: each attempt that ended is an interval from its
// start (the executor's) to the event that ended it (its slot is freed
// after that write, and taken before its dispatch), so at any moment the
// intervals open are at most the slots held. It returns the peak per key.
func checkKeyConcurrency(t *testing.T, all map[string][]store.Revisioned, limit int) map[string]int {
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
	}
	edges := map[string][]edge{}
	for id, h := range all {
		if !isClusterTask(id) {
			continue
		}
		for _, r := range h {
			ev := r.Event
			key := ev.Task.ConcurrencyKey
			if key == "" || ev.Kind != task.KindTransition || (ev.From != task.Ready && ev.From != task.Running) ||
				ev.To == task.Ready || ev.To == task.Running || ev.Task.StartedAt == nil {
				continue
			}
			edges[key] = append(edges[key], edge{*ev.Task.StartedAt, 1}, edge{ev.At, -1})
		}
	}
	peaks := map[string]int{}
	for key, es := range edges {
		sort.Slice(es, func(i, j int) bool {
			if es[i].at.Equal(es[j].at) {
				return es[i].delta < es[j].delta
			}
			return es[i].at.Before(es[j].at)
		})
		n := 0
		for _, e := range es {
			n += e.delta
			peaks[key] = max(peaks[key], n)
		}
		if peaks[key] > limit {
			t.Errorf("key %s had %d attempts at once; its limit is %d", key, peaks[key], limit)
		}
	}
	return peaks
}
