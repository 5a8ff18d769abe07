// Package bench measures AX end to end: no-op tasks through submit → ready →
// executor → completed → succeeded, on an embedded server unless a URL is
// given. It reports throughput and latency percentiles; nothing asserts on
// them (the figures depend on the machine).
package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TypeBench is the no-op task type the bench submits.
const TypeBench = "bench.noop"

// Config configures a run.
type Config struct {
	// URL of a NATS server; empty starts an embedded one in a temp dir.
	URL string
	// NATSOptions authenticate to the server at URL (see internal/natsconn).
	NATSOptions []nats.Option
	// Tasks for the throughput phase (submitted as fast as possible). 0 skips it.
	Tasks int
	// Rate (tasks/s) and Duration of the steady phase. 0 skips it.
	Rate     int
	Duration time.Duration
	// Capacity of the executor. Default 512.
	Capacity float64
	// SyncAlways runs the embedded server with fsync on every write.
	SyncAlways bool
	// Cluster runs three embedded servers in a cluster and R3 streams.
	Cluster bool
	// Orchestrators is how many orchestrators run, each on its own
	// connection, sharing the streams and consumers as that many
	// `ax orchestrator` processes would; on a cluster (or a URL listing
	// several servers) they are spread over the servers. Default 1.
	Orchestrators int
	// KillOrchestrator, when > 0 with two orchestrators or more, kills the
	// last one that long into the steady phase: its connection is closed
	// at once, as the server sees a kill -9 (what it held is never
	// acknowledged nor answered), and it is not started again. The steady
	// phase's Takeover then says how long its tasks waited.
	KillOrchestrator time.Duration
	// GroupCommit turns group commit on (orchestrator.TopologyOptions).
	GroupCommit bool
	// DispatchCacheBytes bounds each orchestrator's dispatch cache
	// (orchestrator.Config); 0 keeps its default.
	DispatchCacheBytes int64
	// Delayed tasks (run_at 2s after submission) are mixed into the steady
	// phase; their lateness (handler start − run_at) is measured.
	Delayed int
	// Backlog, when > 0, runs the backlog probe: that many p5 tasks
	// submitted at once, then a p0 whose submit→start is reported.
	Backlog int
	// Bare, when > 0, also measures bare JetStream on the same server with
	// that many jobs (see Bare), the floor AX's figures are read against.
	Bare int
	// Loop, when > 0, also measures the minimal durable job loop (see
	// durableLoop) on the same server with that many jobs and LoopWorkers
	// jobs in hand at most (default BareWorkers), split over LoopStreams
	// streams (default 1).
	Loop        int
	LoopWorkers int
	LoopStreams int
	// MySQLDSN, when set, runs the audit mirror during the bench and
	// measures its throughput and lag.
	MySQLDSN string
	Logger   *zerolog.Logger
}

// Takeover is what an orchestrator's death during the steady phase cost:
// the tasks it held wait until the others take them over (its direct
// requests go to them at once, its stored messages after the ack wait).
type Takeover struct {
	// Orchestrator is the node id of the one killed, After how long into
	// the phase.
	Orchestrator string        `json:"orchestrator"`
	After        time.Duration `json:"after"`
	// Slow counts the phase's tasks whose submit→success took over a
	// second (none in a healthy steady phase here), and Longest is the
	// longest submit→success of all.
	Slow    int           `json:"slow"`
	Longest time.Duration `json:"longest"`
}

// MirrorStats are the audit mirror's figures over the whole bench.
type MirrorStats struct {
	Events       uint64        `json:"events"`
	Elapsed      time.Duration `json:"elapsed"`
	EventsPerSec float64       `json:"events_per_sec"`
	MaxLag       time.Duration `json:"max_lag"`
	MaxPending   uint64        `json:"max_pending"`
}

// Result is a bench run's figures.
type Result struct {
	// Orchestrators is how many orchestrators ran, and Servers over how
	// many server URLs they were spread.
	Orchestrators int          `json:"orchestrators"`
	Servers       int          `json:"servers"`
	Phases        []Phase      `json:"phases"`
	Mirror        *MirrorStats `json:"mirror,omitempty"`
	// Bare is bare JetStream's figure on the same server (Config.Bare).
	Bare *Bare `json:"bare,omitempty"`
	// Loop is the minimal durable job loop's figure on the same server
	// (Config.Loop).
	Loop *Loop `json:"loop,omitempty"`
	// PeakRSS is the bench process's peak resident memory in bytes, at the
	// end of its phases (bare JetStream's loop not yet run): the
	// orchestrators, the executor, the producer and the observer, and an
	// embedded server's.
	PeakRSS uint64 `json:"peak_rss_bytes,omitempty"`
}

// Phase holds one phase's figures.
type Phase struct {
	Name          string        `json:"name"`
	Tasks         int           `json:"tasks"`
	Elapsed       time.Duration `json:"elapsed"`
	TasksPerSec   float64       `json:"tasks_per_sec"`
	SubmitToStart Percentiles   `json:"submit_to_start"`
	SubmitToDone  Percentiles   `json:"submit_to_done"`
	// DelayedLateness is handler start − run_at of the delayed tasks.
	DelayedTasks    int         `json:"delayed_tasks"`
	DelayedLateness Percentiles `json:"delayed_lateness"`
	// Backlog is, for the backlog probe, how many p5 tasks were submitted
	// just before its p0 task, and UrgentStart that task's submit→start.
	Backlog     int           `json:"backlog,omitempty"`
	UrgentStart time.Duration `json:"urgent_start,omitempty"`
	// Takeover is, for a steady phase during which an orchestrator was
	// killed (Config.KillOrchestrator), what its death cost.
	Takeover *Takeover `json:"takeover,omitempty"`
	// StoredPerTask is how many messages each AX stream stored per task
	// during the phase (from the streams' last sequences); StoredBytes is
	// AX_TASKS's growth in bytes per task.
	StoredPerTask map[string]float64 `json:"stored_per_task"`
	// InMemory names the streams of StoredPerTask kept in memory: what
	// they store costs no disk write (and no fsync).
	InMemory  map[string]bool `json:"in_memory,omitempty"`
	TaskBytes float64         `json:"task_bytes_per_task"`
	// Work is what the orchestrators did during the phase.
	Work Work `json:"work"`
	// DuplicateStarts counts handler runs of a task beyond its first, and
	// DuplicateSuccesses succeeded transitions of a task beyond its first:
	// each task of a phase is expected to run and succeed exactly once.
	DuplicateStarts    int `json:"duplicate_starts"`
	DuplicateSuccesses int `json:"duplicate_successes"`
	// ServerTraffic is the embedded server's traffic per task during the
	// phase, the bench's own observer of AX_TASKS included (nil with an
	// external server or a cluster).
	ServerTraffic *TrafficPer `json:"server_traffic_per_task,omitempty"`
	// CPUPerTask is the bench process's CPU time (user and system) during
	// the phase per task: the orchestrators', the executor's, the
	// producer's and the observer's, and an embedded server's.
	CPUPerTask time.Duration `json:"cpu_per_task"`
}

// streamMarks is every AX stream's last sequence, and AX_TASKS's bytes.
type streamMarks struct {
	last   map[string]uint64
	memory map[string]bool // streams kept in memory
	bytes  uint64
}

func marks(ctx context.Context, js jetstream.JetStream) (streamMarks, error) {
	m := streamMarks{last: map[string]uint64{}, memory: map[string]bool{}}
	lister := js.ListStreams(ctx)
	for info := range lister.Info() {
		if !strings.HasPrefix(info.Config.Name, "AX_") {
			continue
		}
		m.last[info.Config.Name] = info.State.LastSeq
		m.memory[info.Config.Name] = info.Config.Storage == jetstream.MemoryStorage
		if info.Config.Name == subject.StreamTasks {
			m.bytes = info.State.Bytes
		}
	}
	if err := lister.Err(); err != nil {
		return m, fmt.Errorf("bench: list streams: %w", err)
	}
	return m, nil
}

// stored fills p's stored-message figures from marks taken before it.
func (p *Phase) stored(ctx context.Context, js jetstream.JetStream, before streamMarks) error {
	after, err := marks(ctx, js)
	if err != nil {
		return err
	}
	p.StoredPerTask = map[string]float64{}
	for name, seq := range after.last {
		if n := seq - before.last[name]; n > 0 {
			p.StoredPerTask[name] = float64(n) / float64(p.Tasks)
			if after.memory[name] {
				if p.InMemory == nil {
					p.InMemory = map[string]bool{}
				}
				p.InMemory[name] = true
			}
		}
	}
	p.TaskBytes = float64(after.bytes-before.bytes) / float64(p.Tasks)
	return nil
}

// Percentiles of a latency distribution.
type Percentiles struct {
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: d[len(d)-1]}
}

// payload carries the client's submit time (and a delayed task's run_at).
type payload struct {
	SubmitNanos int64 `json:"t"`
	RunAtNanos  int64 `json:"r,omitempty"`
	// Urgent marks the backlog probe's p0 task.
	Urgent bool `json:"u,omitempty"`
}

// recorder collects latencies of one phase, keyed by task id.
type recorder struct {
	mu      sync.Mutex
	start   []time.Duration
	done    []time.Duration
	late    []time.Duration
	pending map[string]bool
	// startedIDs and succeededIDs are the tasks seen started and
	// succeeded; dupStarts and dupSuccesses count them seen again.
	startedIDs, succeededIDs map[string]bool
	dupStarts, dupSuccesses  int
	// submitting is true until every task of the phase was submitted.
	submitting bool
	allDone    chan struct{}
	closeOnce  sync.Once
	last       time.Time
	// urgent is the backlog probe's p0 submit→start.
	urgent time.Duration
}

func newRecorder(ids int) *recorder {
	return &recorder{pending: make(map[string]bool, ids), startedIDs: make(map[string]bool, ids), succeededIDs: make(map[string]bool, ids),
		submitting: true, allDone: make(chan struct{})}
}

// doneSubmitting marks the end of submission.
func (r *recorder) doneSubmitting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submitting = false
	r.checkDone()
}

// checkDone closes allDone once everything submitted succeeded. Call with mu held.
func (r *recorder) checkDone() {
	if !r.submitting && len(r.pending) == 0 {
		r.closeOnce.Do(func() { close(r.allDone) })
	}
}

func (r *recorder) expect(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.pending[id] = true
	}
}

func (r *recorder) started(id string, p payload) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.startedIDs[id] {
		r.dupStarts++
		return
	}
	r.startedIDs[id] = true
	if p.RunAtNanos > 0 {
		r.late = append(r.late, now.Sub(time.Unix(0, p.RunAtNanos)))
		return
	}
	d := now.Sub(time.Unix(0, p.SubmitNanos))
	if p.Urgent {
		r.urgent = d
		return
	}
	r.start = append(r.start, d)
}

// succeeded records a success; a delayed task's counts only as done (its
// latency is measured from run_at when it starts).
func (r *recorder) succeeded(id string, d time.Duration, at time.Time, delayed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.succeededIDs[id] {
		r.dupSuccesses++
		return
	}
	if !r.pending[id] {
		return // not this phase's
	}
	r.succeededIDs[id] = true
	delete(r.pending, id)
	if !delayed {
		r.done = append(r.done, d)
		r.last = at
	}
	r.checkDone()
}

// serverURL returns url, or, when it is empty, the URL of an embedded server
// started with its store in a new temporary directory named after pattern;
// stop stops that server and removes the directory.
func serverURL(url, pattern string, syncAlways, cluster bool) (_ string, stop func(), _ error) {
	url, stop, _, err := startServer(url, pattern, syncAlways, cluster)
	return url, stop, err
}

// startServer is serverURL that also returns, for one embedded server, a
// reading of the messages and bytes it received and sent (nil otherwise).
func startServer(url, pattern string, syncAlways, cluster bool) (_ string, stop func(), _ func() Traffic, _ error) {
	if url != "" {
		return url, func() {}, nil, nil
	}
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, nil, err
	}
	var halt func()
	var traffic func() Traffic
	if cluster {
		c, cerr := natsserver.StartCluster(3, natsserver.Config{StoreDir: dir, SyncAlways: syncAlways})
		if cerr == nil {
			url, halt = c.URL(), c.Stop
		}
		err = cerr
	} else {
		srv, serr := natsserver.Start(natsserver.Config{StoreDir: dir, SyncAlways: syncAlways})
		if serr == nil {
			url, halt = srv.URL(), srv.Stop
			traffic = func() Traffic {
				v, verr := srv.Varz(nil)
				if verr != nil {
					return Traffic{}
				}
				return Traffic{InMsgs: v.InMsgs, OutMsgs: v.OutMsgs, InBytes: v.InBytes, OutBytes: v.OutBytes}
			}
		}
		err = serr
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	return url, func() {
		halt()
		os.RemoveAll(dir)
	}, traffic, nil
}

// Traffic is what a server received from and sent to its clients (and
// routes): messages and payload bytes, as its /varz counts them.
type Traffic struct {
	InMsgs   int64 `json:"in_msgs"`
	OutMsgs  int64 `json:"out_msgs"`
	InBytes  int64 `json:"in_bytes"`
	OutBytes int64 `json:"out_bytes"`
}

// per is the traffic from before to t, per unit of n.
func (t Traffic) per(before Traffic, n int) *TrafficPer {
	if n <= 0 {
		return nil
	}
	f := float64(n)
	return &TrafficPer{InMsgs: float64(t.InMsgs-before.InMsgs) / f, OutMsgs: float64(t.OutMsgs-before.OutMsgs) / f,
		InBytes: float64(t.InBytes-before.InBytes) / f, OutBytes: float64(t.OutBytes-before.OutBytes) / f}
}

// TrafficPer is a server's traffic per task (or per bare job).
type TrafficPer struct {
	InMsgs   float64 `json:"in_msgs"`
	OutMsgs  float64 `json:"out_msgs"`
	InBytes  float64 `json:"in_bytes"`
	OutBytes float64 `json:"out_bytes"`
}

// Run executes the configured phases and returns their figures.
func Run(ctx context.Context, cfg Config) (Result, error) {
	var res Result
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 512
	}
	url, stop, traffic, err := startServer(cfg.URL, "ax-bench-", cfg.SyncAlways, cfg.Cluster)
	if err != nil {
		return res, err
	}
	defer stop()
	var rec atomicRecorder
	topo := orchestrator.TopologyOptions{Replicas: 1, GroupCommit: &cfg.GroupCommit}
	if cfg.Cluster {
		topo.Replicas = 3
	}
	st, err := startStack(ctx, stackConfig{url: url, opts: cfg.NATSOptions, topo: topo, capacity: cfg.Capacity,
		orchestrators: max(cfg.Orchestrators, 1), log: log,
		orch: func(c *orchestrator.Config) { c.DispatchCacheBytes = cfg.DispatchCacheBytes },
		register: func(ex *executor.Executor) {
			ex.HandleFunc(TypeBench, func(_ context.Context, j *executor.Job) (any, error) {
				var p payload
				if json.Unmarshal(j.Payload, &p) == nil && p.SubmitNanos > 0 {
					if r := rec.get(); r != nil {
						r.started(j.ID, p)
					}
				}
				return nil, nil
			})
		}})
	if err != nil {
		return res, err
	}
	defer st.close()
	res.Orchestrators, res.Servers = len(st.orchs), st.servers
	connect := st.connect

	wnc, err := connect()
	if err != nil {
		return res, err
	}
	if err := watch(ctx, wnc, &rec); err != nil {
		return res, err
	}
	cnc, err := connect()
	if err != nil {
		return res, err
	}
	client, err := sdk.New(ctx, cnc)
	if err != nil {
		return res, err
	}

	var mw *mirrorWatch
	if cfg.MySQLDSN != "" {
		mnc, err := connect()
		if err != nil {
			return res, err
		}
		if mw, err = startMirror(ctx, mnc, cfg.MySQLDSN, log); err != nil {
			return res, err
		}
		defer mw.stop()
	}
	js, err := jetstream.New(cnc)
	if err != nil {
		return res, err
	}
	// measured runs a phase and adds it, with what it stored, to res.
	measured := func(run func() (Phase, error)) error {
		before, err := marks(ctx, js)
		if err != nil {
			return err
		}
		worked := st.mark()
		var sent Traffic
		if traffic != nil {
			sent = traffic()
		}
		used := processUsage()
		p, err := run()
		if err != nil {
			return err
		}
		if n := p.Tasks + p.DelayedTasks; n > 0 {
			p.CPUPerTask = (processUsage().cpu - used.cpu) / time.Duration(n)
		}
		if traffic != nil {
			p.ServerTraffic = traffic().per(sent, p.Tasks+p.DelayedTasks)
		}
		p.Work = st.work(ctx, worked, p.Tasks+p.DelayedTasks)
		if err := p.stored(ctx, js, before); err != nil {
			return err
		}
		res.Phases = append(res.Phases, p)
		return nil
	}
	if cfg.Tasks > 0 {
		if err := measured(func() (Phase, error) { return throughput(ctx, client, &rec, cfg.Tasks) }); err != nil {
			return res, err
		}
	}
	if cfg.Rate > 0 && cfg.Duration > 0 {
		var kill *killAt
		if cfg.KillOrchestrator > 0 && len(st.orchs) > 1 {
			last := len(st.orchs) - 1
			kill = &killAt{after: cfg.KillOrchestrator, name: st.names[last], kill: func() { st.kill(last) }}
		}
		if err := measured(func() (Phase, error) {
			return steady(ctx, client, &rec, cfg.Rate, cfg.Duration, cfg.Delayed, kill)
		}); err != nil {
			return res, err
		}
	}
	if cfg.Backlog > 0 {
		if err := measured(func() (Phase, error) { return backlog(ctx, client, &rec, cfg.Backlog) }); err != nil {
			return res, err
		}
	}
	res.PeakRSS = processUsage().peakRSS
	if cfg.Bare > 0 {
		var sent Traffic
		if traffic != nil {
			sent = traffic()
		}
		b, err := bare(ctx, js, cfg.Bare, topo.Replicas)
		if err != nil {
			return res, err
		}
		if traffic != nil {
			b.ServerTraffic = traffic().per(sent, b.Jobs)
		}
		res.Bare = &b
	}
	if cfg.Loop > 0 {
		l, err := durableLoop(ctx, js, cfg.Loop, cmp.Or(cfg.LoopWorkers, BareWorkers), cfg.LoopStreams, topo.Replicas)
		if err != nil {
			return res, err
		}
		res.Loop = &l
	}
	if mw != nil {
		st, err := mw.finish(ctx)
		if err != nil {
			return res, err
		}
		res.Mirror = &st
	}
	return res, nil
}

// atomicRecorder holds the current phase's recorder.
type atomicRecorder struct {
	mu sync.Mutex
	r  *recorder
}

func (a *atomicRecorder) get() *recorder {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.r
}

func (a *atomicRecorder) set(r *recorder) {
	a.mu.Lock()
	a.r = r
	a.mu.Unlock()
}

// watch follows succeeded transitions in the task histories.
func watch(ctx context.Context, nc *nats.Conn, rec *atomicRecorder) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, subject.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.TaskAll}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	succeeded := []byte(`"to":"succeeded"`)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		if !bytes.Contains(msg.Data(), succeeded) {
			return // decode only what is measured
		}
		var ev eventHead
		if wirejson.Unmarshal(msg.Data(), &ev) != nil || ev.To != task.Succeeded {
			return
		}
		var p payload
		if wirejson.Unmarshal(ev.Task.Payload, &p) != nil {
			return
		}
		if r := rec.get(); r != nil {
			r.succeeded(ev.Task.ID, ev.At.Sub(time.Unix(0, p.SubmitNanos)), ev.At, p.RunAtNanos > 0)
		}
	}, jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	go func() { <-ctx.Done(); cc.Stop() }()
	return nil
}

func specs(n int, prefix string, seq *int) []task.Spec {
	out := make([]task.Spec, n)
	for i := range out {
		*seq++
		s, _ := task.New(TypeBench, nil)
		s.ID = prefix + strconv.Itoa(*seq)
		s.Payload = []byte(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `}`)
		out[i] = s
	}
	return out
}

func throughput(ctx context.Context, c *sdk.Client, rec *atomicRecorder, n int) (Phase, error) {
	r := newRecorder(n)
	rec.set(r)
	prefix := fmt.Sprintf("bench-%d-", time.Now().UnixNano())
	seq := 0
	begin := time.Now()
	const chunk = 1000
	for sent := 0; sent < n; sent += chunk {
		batch := specs(min(chunk, n-sent), prefix, &seq)
		ids := make([]string, len(batch))
		for i, s := range batch {
			ids[i] = s.ID
		}
		r.expect(ids)
		if _, err := c.SubmitMany(ctx, batch); err != nil {
			return Phase{}, err
		}
	}
	r.doneSubmitting()
	if err := waitAll(ctx, r, n); err != nil {
		return Phase{}, err
	}
	elapsed := r.last.Sub(begin)
	return phase("throughput", n, elapsed, r), nil
}

// steadySubmitters bounds the steady phase's batches in flight.
const steadySubmitters = 64

// killAt kills an orchestrator (named name) after into a steady phase.
type killAt struct {
	after time.Duration
	name  string
	kill  func()
}

func steady(ctx context.Context, c *sdk.Client, rec *atomicRecorder, rate int, d time.Duration, delayed int, kill *killAt) (Phase, error) {
	total := int(float64(rate) * d.Seconds())
	r := newRecorder(total + delayed)
	rec.set(r)
	prefix := fmt.Sprintf("steady-%d-", time.Now().UnixNano())
	seq := 0
	const tick = 10 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	begin := time.Now()
	delayedSent := 0
	// Open loop, as many producers: a tick's batch does not wait for the
	// previous one's answer (a direct submission is answered once its
	// task exists), up to steadySubmitters batches in flight.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(steadySubmitters)
	for sent := 0; sent < total; {
		select {
		case <-gctx.Done():
			return Phase{}, g.Wait()
		case <-t.C:
		}
		if kill != nil && kill.kill != nil && time.Since(begin) >= kill.after {
			// In the group, so the phase ends after the killed
			// orchestrator's goroutines did.
			k := kill.kill
			kill.kill = nil
			g.Go(func() error { k(); return nil })
		}
		// Catch up to the schedule if a tick was late.
		due := min(total, int(time.Since(begin).Seconds()*float64(rate))+perTick) - sent
		if due <= 0 {
			continue
		}
		batch := specs(due, prefix, &seq)
		// Delayed tasks, spread over the phase, due 2s after submission.
		for k := delayedSent; k < delayed && k*total < (sent+due)*delayed; k++ {
			s := specs(1, prefix+"d", &seq)[0]
			at := time.Now().Add(2 * time.Second)
			s.RunAt = &at
			s.Payload = []byte(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `,"r":` + strconv.FormatInt(at.UnixNano(), 10) + `}`)
			batch = append(batch, s)
			delayedSent++
		}
		ids := make([]string, len(batch))
		for i, s := range batch {
			ids[i] = s.ID
		}
		r.expect(ids)
		g.Go(func() error {
			_, err := c.SubmitMany(gctx, batch)
			return err
		})
		sent += due
	}
	if err := g.Wait(); err != nil {
		return Phase{}, err
	}
	r.doneSubmitting()
	if err := waitAll(ctx, r, total+delayedSent); err != nil {
		return Phase{}, err
	}
	p := phase(fmt.Sprintf("steady %d/s", rate), total, r.last.Sub(begin), r)
	p.DelayedTasks = delayedSent
	if kill != nil && kill.kill == nil {
		p.Takeover = &Takeover{Orchestrator: kill.name, After: kill.after, Longest: p.SubmitToDone.Max}
		r.mu.Lock()
		for _, d := range r.done {
			if d > time.Second {
				p.Takeover.Slow++
			}
		}
		r.mu.Unlock()
	}
	return p, nil
}

// backlog is the backlog probe: n p5 tasks submitted as fast as possible,
// then one p0; it reports the p0's submit→start (the design notes' morning
// burst: urgent work must not wait for the burst's intake).
func backlog(ctx context.Context, c *sdk.Client, rec *atomicRecorder, n int) (Phase, error) {
	r := newRecorder(n + 1)
	rec.set(r)
	prefix := fmt.Sprintf("backlog-%d-", time.Now().UnixNano())
	seq := 0
	begin := time.Now()
	const chunk = 1000
	for sent := 0; sent < n; sent += chunk {
		batch := specs(min(chunk, n-sent), prefix, &seq)
		ids := make([]string, len(batch))
		for i := range batch {
			batch[i].Priority = new(5)
			ids[i] = batch[i].ID
		}
		r.expect(ids)
		if _, err := c.SubmitMany(ctx, batch); err != nil {
			return Phase{}, err
		}
	}
	u := specs(1, prefix+"urgent-", &seq)[0]
	u.Priority = new(0)
	u.Payload = []byte(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `,"u":true}`)
	r.expect([]string{u.ID})
	if _, err := c.Submit(ctx, u); err != nil {
		return Phase{}, err
	}
	r.doneSubmitting()
	if err := waitAll(ctx, r, n+1); err != nil {
		return Phase{}, err
	}
	p := phase(fmt.Sprintf("backlog %d p5 + p0", n), n+1, r.last.Sub(begin), r)
	r.mu.Lock()
	p.Backlog, p.UrgentStart = n, r.urgent
	r.mu.Unlock()
	return p, nil
}

func waitAll(ctx context.Context, r *recorder, n int) error {
	select {
	case <-r.allDone:
		return nil
	case <-ctx.Done():
		r.mu.Lock()
		left := len(r.pending)
		r.mu.Unlock()
		return fmt.Errorf("bench: %d of %d tasks unfinished: %w", left, n, ctx.Err())
	}
}

func phase(name string, n int, elapsed time.Duration, r *recorder) Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Phase{
		Name: name, Tasks: n, Elapsed: elapsed,
		TasksPerSec:     float64(n) / elapsed.Seconds(),
		SubmitToStart:   percentiles(r.start),
		SubmitToDone:    percentiles(r.done),
		DelayedLateness: percentiles(r.late),
		DuplicateStarts: r.dupStarts, DuplicateSuccesses: r.dupSuccesses,
	}
}
