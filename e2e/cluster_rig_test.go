//go:build unix

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/sdk"
)

// clusterRig is everything TestCluster runs: the NATS cluster, the AX
// processes, the faults injected so far and what was scraped from the
// orchestrators' metrics.
type clusterRig struct {
	t       *testing.T
	c       *cluster
	nats    *natsCluster
	rng     *rand.Rand
	orchs   []*proc
	workers []*proc
	mirror  *proc
	counter *counterScraper
	start   time.Time
	// readers are JetStream contexts on the test's connections, one per
	// node, for reading the results (read rotates over them).
	readers []jetstream.JetStream
	readN   int

	faults  map[string]int
	crashes map[string]int // unexpected exits (the process was restarted)

	// killExecutor, for a rig without executor processes (TestClusterFloor),
	// kills one of its in-process executors and returns its name and how to
	// start it again.
	killExecutor func() (name string, restart func())
}

func newClusterRig(t *testing.T, c *cluster, nc *natsCluster, rng *rand.Rand) *clusterRig {
	return &clusterRig{t: t, c: c, nats: nc, rng: rng, counter: newCounterScraper(),
		faults: make(map[string]int), crashes: make(map[string]int), start: time.Now()}
}

// logf logs with the time since the rig started.
func (r *clusterRig) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%6.1fs] %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// axHelp returns `ax <cmd> --help`, to pass flags only a newer ax has.
func axHelp(cmd string) string {
	out, _ := exec.Command(axBin, cmd, "--help").CombinedOutput()
	return string(out)
}

// startOrchestrator starts orchestrator i with --replicas 3 and its own
// metrics address, connected to the cluster (starting from node i).
func (r *clusterRig) startOrchestrator(i int, extra []string) {
	name := "orch-" + strconv.Itoa(i+1)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(r.t))
	args := append([]string{"orchestrator", "--nats", r.nats.URLs(i), "--node-id", name, "--log-level", logLevel(),
		"--replicas", "3", "--retry-base", "100ms", "--retry-max", "500ms", "--ack-wait", "5s",
		"--breaker-threshold", "1", "--metrics-addr", addr}, extra...)
	p := r.c.newProc(name, args...)
	r.counter.add(name, addr)
	p.start()
	r.orchs = append(r.orchs, p)
}

// startWorkers starts n executors with the demo handlers.
func (r *clusterRig) startWorkers(n int) {
	for i := range n {
		name := "worker-" + strconv.Itoa(i+1)
		p := r.c.newProc(name, "worker", "--nats", r.nats.URLs(i), "--id", name, "--log-level", logLevel(),
			"--capacity", "16", "--ack-wait", "5s")
		p.start()
		r.workers = append(r.workers, p)
	}
}

// startMirror starts `ax mirror` writing into the database of dsn.
func (r *clusterRig) startMirror(dsn string) {
	r.mirror = r.c.newProc("mirror", "mirror", "--nats", r.nats.URLs(2), "--mysql-dsn", dsn, "--log-level", logLevel(), "--ack-wait", "5s")
	r.mirror.start()
}

// axProcs lists every ax process.
func (r *clusterRig) axProcs() []*proc {
	ps := append(append([]*proc{}, r.orchs...), r.workers...)
	if r.mirror != nil {
		ps = append(ps, r.mirror)
	}
	return ps
}

// waitTopology waits until every AX stream, bucket and object store exists
// with 3 replicas (the orchestrators create them; everything else started
// earlier would create missing ones with 1 replica).
func (r *clusterRig) waitTopology(js jetstream.JetStream, timeout time.Duration) {
	r.t.Helper()
	eventually(r.t, timeout, "AX's streams with 3 replicas", func() (bool, string) {
		bad := r.topologyReplicas(js)
		return len(bad) == 0, strings.Join(bad, ", ")
	})
}

// checkReplicasKept: the replica count is the cluster's configuration. An
// orchestrator asking for fewer replicas is refused with a clear message
// and exits; `ax topology` without --replicas keeps R3.
func (r *clusterRig) checkReplicasKept() {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, axBin, "orchestrator", "--nats", r.nats.URLs(0), "--node-id", "orch-lowering",
		"--replicas", "1", "--log-level", "warn").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "refusing to lower the replica count") {
		r.t.Errorf("ax orchestrator --replicas 1 on R3 streams: %v, want a refusal naming it\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, axBin, "topology", "--nats", r.nats.URLs(0)).CombinedOutput()
	if err != nil || strings.Count(string(out), "replicas 3") != len(topology.Streams(topology.Options{})) {
		r.t.Errorf("ax topology without --replicas: %v\n%s", err, out)
	}
	if bad := r.topologyReplicas(r.readers[0]); len(bad) > 0 {
		r.t.Errorf("streams not at 3 replicas after a lower count was asked for: %s", strings.Join(bad, ", "))
	}
}

// topologyReplicas lists the AX streams that are missing or not R3.
func (r *clusterRig) topologyReplicas(js jetstream.JetStream) []string {
	var names []string
	for _, s := range topology.Streams(topology.Options{Replicas: 3}) {
		names = append(names, s.Name)
	}
	for _, b := range topology.Buckets(topology.Options{Replicas: 3}) {
		names = append(names, "KV_"+b.Bucket)
	}
	for _, o := range topology.ObjectStores(topology.Options{Replicas: 3}) {
		names = append(names, "OBJ_"+o.Bucket)
	}
	var bad []string
	// The capabilities' object stores, created at their first dispatches
	// (none before the workload).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	lister := js.StreamNames(ctx)
	for name := range lister.Name() {
		bucket, isObjects := strings.CutPrefix(name, "OBJ_")
		if _, ok := subject.ObjectBucketCapability(bucket); ok && isObjects {
			names = append(names, name)
		}
	}
	if err := lister.Err(); err != nil {
		bad = append(bad, "listing the object stores: "+err.Error())
	}
	cancel()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := js.Stream(ctx, name)
		if err != nil {
			cancel()
			bad = append(bad, name+": "+err.Error())
			continue
		}
		info, err := st.Info(ctx)
		cancel()
		switch {
		case err != nil:
			bad = append(bad, name+": "+err.Error())
		case info.Config.Replicas != 3:
			bad = append(bad, fmt.Sprintf("%s: R%d", name, info.Config.Replicas))
		}
	}
	return bad
}

// connect opens one connection per node (connectNodes) and an SDK client
// on each.
func (r *clusterRig) connect() ([]*nats.Conn, []*sdk.Client) {
	r.t.Helper()
	conns := r.connectNodes()
	var clients []*sdk.Client
	for i, nc := range conns {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl, err := sdk.New(ctx, nc)
		cancel()
		if err != nil {
			r.t.Fatalf("sdk client on %s: %v", r.nats.URLs(i), err)
		}
		clients = append(clients, cl)
	}
	return conns, clients
}

// connectNodes opens one connection per node, each preferring its node and
// failing over to the others, pinging every 2 s so a paused node is left
// soon.
func (r *clusterRig) connectNodes() []*nats.Conn {
	r.t.Helper()
	var conns []*nats.Conn
	for i := range r.nats.nodes {
		nc, err := nats.Connect(r.nats.URLs(i), nats.Name("ax-e2e-"+strconv.Itoa(i+1)), nats.DontRandomize(),
			nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
			nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2))
		if err != nil {
			r.t.Fatalf("connect to %s: %v", r.nats.URLs(i), err)
		}
		r.t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	return conns
}

// fault records an injected fault.
func (r *clusterRig) fault(kind, format string, args ...any) {
	r.faults[kind]++
	r.logf("fault %s: %s", kind, fmt.Sprintf(format, args...))
}

// supervise restarts every process that exited although nobody stopped it
// (as systemd's Restart=always would) and counts it as a crash.
func (r *clusterRig) supervise() {
	r.t.Helper()
	for _, p := range r.axProcs() {
		if p.cur != nil && !p.alive() && !p.stopped {
			r.crashes[p.name]++
			r.logf("%s exited unexpectedly (%v); restarting it. Its log ends:\n%s", p.name, p.cur.err, tail(p.logPath, 15))
			p.start()
		}
	}
	for _, n := range r.nats.nodes {
		if p := n.proc; p.cur != nil && !p.alive() && !p.stopped {
			r.crashes[p.name]++
			r.logf("%s exited unexpectedly (%v); restarting it. Its log ends:\n%s", p.name, p.cur.err, tail(p.logPath, 15))
			r.nats.start(n)
		}
	}
}

// sleep waits d, supervising the processes meanwhile.
func (r *clusterRig) sleep(d time.Duration) {
	end := time.Now().Add(d)
	for {
		r.supervise()
		left := time.Until(end)
		if left <= 0 {
			return
		}
		time.Sleep(min(left, 250*time.Millisecond))
	}
}

// between returns a random duration in [lo, hi].
func (r *clusterRig) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

// injectFaults runs the fault schedule until end: every 5–10 s one node is
// partitioned from the other two for 1.5–3.5 s, then, in rotation, a node
// is killed with -9 and restarted on its store, an orchestrator is killed
// with -9 and restarted, a node is paused with SIGSTOP for 2–4 s, or an
// executor is killed with -9 and restarted. Node faults never overlap.
func (r *clusterRig) injectFaults(end time.Time) {
	r.t.Helper()
	for i := 0; time.Now().Before(end); i++ {
		step := time.Now()
		interval := r.between(5*time.Second, 10*time.Second)

		k := r.rng.IntN(len(r.nats.nodes))
		d := r.between(1500*time.Millisecond, 3500*time.Millisecond)
		r.nats.partition(k)
		r.fault("partition", "%s cut from the other nodes for %s", r.nats.nodes[k].name, d.Round(time.Millisecond))
		r.sleep(d)
		r.nats.heal(k)

		switch i % 4 {
		case 0:
			n := r.nats.nodes[r.rng.IntN(len(r.nats.nodes))]
			down := r.between(time.Second, 3*time.Second)
			n.proc.kill9()
			r.fault("node kill -9", "%s killed, restarted after %s", n.name, down.Round(time.Millisecond))
			r.sleep(down)
			r.nats.start(n)
			took, ok, status := r.nats.awaitHealthy(n, 30*time.Second)
			r.logf("%s restarted: healthy=%v after %s (%s)", n.name, ok, took.Round(100*time.Millisecond), status)
		case 1:
			if len(r.orchs) == 0 {
				break // TestClusterFloor: no orchestrator to kill
			}
			p := r.orchs[r.rng.IntN(len(r.orchs))]
			r.counter.scrape(p.name)
			p.kill9()
			down := r.between(500*time.Millisecond, 2*time.Second)
			r.fault("orchestrator kill -9", "%s killed, restarted after %s", p.name, down.Round(time.Millisecond))
			r.sleep(down)
			p.start()
		case 2:
			j := r.rng.IntN(len(r.nats.nodes))
			d := r.between(2*time.Second, 4*time.Second)
			if err := r.nats.pause(j); err != nil {
				r.t.Fatalf("SIGSTOP %s: %v", r.nats.nodes[j].name, err)
			}
			r.fault("node SIGSTOP", "%s paused for %s", r.nats.nodes[j].name, d.Round(time.Millisecond))
			r.sleep(d)
			if err := r.nats.resume(j); err != nil {
				r.t.Fatalf("SIGCONT %s: %v", r.nats.nodes[j].name, err)
			}
		case 3:
			if len(r.workers) == 0 {
				name, restart := r.killExecutor()
				down := r.between(500*time.Millisecond, 2*time.Second)
				r.fault("executor kill", "%s stopped (its jobs in hand dropped), restarted after %s", name, down.Round(time.Millisecond))
				r.sleep(down)
				restart()
				break
			}
			p := r.workers[r.rng.IntN(len(r.workers))]
			p.kill9()
			down := r.between(500*time.Millisecond, 2*time.Second)
			r.fault("executor kill -9", "%s killed, restarted after %s", p.name, down.Round(time.Millisecond))
			r.sleep(down)
			p.start()
		}
		r.sleep(time.Until(step.Add(interval)))
	}
}

// healAll restores every link, resumes paused nodes, starts anything down
// and waits (bounded) for every node to be healthy.
func (r *clusterRig) healAll() {
	r.t.Helper()
	r.nats.healAll()
	for i, n := range r.nats.nodes {
		if err := r.nats.resume(i); err != nil {
			r.t.Fatalf("SIGCONT %s: %v", n.name, err)
		}
		if !n.proc.alive() {
			r.nats.start(n)
		}
	}
	for _, p := range r.axProcs() {
		if !p.alive() {
			p.start()
		}
	}
	for _, n := range r.nats.nodes {
		took, ok, status := r.nats.awaitHealthy(n, 60*time.Second)
		r.logf("after healing, %s healthy=%v after %s (%s)", n.name, ok, took.Round(100*time.Millisecond), status)
	}
}

// faultSummary renders the faults injected, by kind.
func (r *clusterRig) faultSummary() (int, string) {
	var kinds []string
	total := 0
	for k, n := range r.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	return total, strings.Join(kinds, ", ")
}

// counterScraper reads counters from the orchestrators' /metrics and sums
// them over every life of each process (a restarted process starts at 0;
// process_start_time_seconds tells the lives apart).
type counterScraper struct {
	mu    sync.Mutex
	addrs map[string]string
	procs map[string]*scraped
	seen  map[string]bool // metric names seen at least once
}

type scraped struct {
	start      float64
	base, last map[string]float64
}

// scrapedCounters are the counters summed per label set.
var scrapedCounters = []string{"ax_reconciler_repairs_total", "ax_consumer_restarts_total"}

// subsystem is a metric name's prefix up to its second underscore
// (ax_reconciler_).
func subsystem(name string) string {
	if i := strings.Index(name, "_"); i >= 0 {
		if j := strings.Index(name[i+1:], "_"); j >= 0 {
			return name[:i+j+2]
		}
	}
	return name
}

func newCounterScraper() *counterScraper {
	return &counterScraper{addrs: make(map[string]string), procs: make(map[string]*scraped), seen: make(map[string]bool)}
}

func (s *counterScraper) add(name, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs[name] = addr
	s.procs[name] = &scraped{base: map[string]float64{}, last: map[string]float64{}}
}

// scrape reads one process's metrics now (errors are ignored: it may be
// down).
func (s *counterScraper) scrape(name string) {
	s.mu.Lock()
	addr := s.addrs[name]
	s.mu.Unlock()
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	values := map[string]float64{}
	start := -1.0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		if series == "process_start_time_seconds" {
			start = v
			continue
		}
		for _, c := range scrapedCounters {
			if series == c || strings.HasPrefix(series, c+"{") {
				values[series] = v
			}
			// A counter vector with no label set yet is not exposed at
			// all: another metric of its subsystem (ax_reconciler_…)
			// tells that it exists and is 0.
			if strings.HasPrefix(series, subsystem(c)) {
				seen[c] = true
			}
		}
	}
	if sc.Err() != nil || start < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range seen {
		s.seen[c] = true
	}
	p := s.procs[name]
	if p.start != start {
		for k, v := range p.last {
			p.base[k] += v
		}
		p.start, p.last = start, map[string]float64{}
	}
	for k, v := range values {
		p.last[k] = v
	}
}

// loop scrapes every process every 2 s until stop is closed.
func (s *counterScraper) loop(stop <-chan struct{}) {
	for {
		s.mu.Lock()
		var names []string
		for n := range s.addrs {
			names = append(names, n)
		}
		s.mu.Unlock()
		for _, n := range names {
			s.scrape(n)
		}
		select {
		case <-stop:
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// totals sums each series over every process and life; ok is false when a
// counter was never exposed.
func (s *counterScraper) totals(counter string) (map[string]float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, p := range s.procs {
		for _, m := range []map[string]float64{p.base, p.last} {
			for k, v := range m {
				if k == counter || strings.HasPrefix(k, counter+"{") {
					out[strings.TrimPrefix(k, counter)] += v
				}
			}
		}
	}
	return out, s.seen[counter]
}

// render prints a counter's totals by label set, or n/a.
func (s *counterScraper) render(counter string) string {
	m, ok := s.totals(counter)
	if !ok {
		return "n/a (not exposed)"
	}
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %g", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// jetStream returns a JetStream context on a plain connection to the
// cluster: it creates nothing (an SDK client would create missing streams
// with 1 replica).
func (r *clusterRig) jetStream() jetstream.JetStream {
	r.t.Helper()
	nc, err := nats.Connect(r.nats.URLs(0), nats.Name("ax-e2e-topology"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		r.t.Fatalf("connect to %s: %v", r.nats.URLs(0), err)
	}
	r.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	return js
}

// dumpGoroutines makes every running ax process print its goroutines
// (SIGQUIT) into its log and exit, for a post-mortem of stuck tasks.
func (r *clusterRig) dumpGoroutines() string {
	var logs []string
	for _, p := range r.axProcs() {
		if !p.alive() {
			continue
		}
		p.stopped = true
		if err := p.cur.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
			continue
		}
		select {
		case <-p.cur.done:
			logs = append(logs, p.logPath)
		case <-time.After(10 * time.Second):
		}
	}
	where := "set AX_E2E_LOGDIR to keep them"
	if dir := os.Getenv("AX_E2E_LOGDIR"); dir != "" {
		where = "kept under " + dir
	}
	return fmt.Sprintf("goroutine dumps (SIGQUIT) of %d ax processes are at the end of their logs (%s)", len(logs), where)
}

// read runs a read of the results on the test's connections in rotation
// until it succeeds (a node may answer "no responders" or time out for a
// while after the faults) or two minutes passed, which fails the test.
func (r *clusterRig) read(what string, op func(ctx context.Context, js jetstream.JetStream) error) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		js := r.readers[r.readN%len(r.readers)]
		r.readN++
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := op(ctx, js)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("read %s: %v", what, err)
		}
		r.logf("read %s: %v; trying again", what, err)
		time.Sleep(time.Second)
	}
}

// killAll kills every process at the end of the test, after reporting any
// that exited although nobody stopped it.
func (r *clusterRig) killAll() {
	for _, p := range r.c.procs {
		if p.cur == nil {
			continue
		}
		if !p.alive() {
			if !p.stopped {
				r.t.Errorf("process %s exited unexpectedly: %v", p.name, p.cur.err)
				p.stopped = true
			}
			continue
		}
		p.stopped = true
		_ = p.cur.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.cur.done:
		case <-time.After(10 * time.Second):
			r.t.Errorf("process %s (pid %d) did not die", p.name, p.cur.cmd.Process.Pid)
		}
	}
}
