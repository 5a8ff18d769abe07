package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TypeFair is the no-op task type of the fairness scenario.
const TypeFair = "bench.fair"

// Defaults of FairnessConfig.
const (
	DefaultFairnessATasks = 100_000
	DefaultFairnessBTasks = 100
	DefaultFairnessBBatch = 25
	// The executor runs 16 tasks of 5ms at a time (at most 3,200/s):
	// slower than the orchestrators take submissions in, so A's backlog
	// waits as ready tasks, which is what fairness orders.
	DefaultFairnessCapacity    = 16
	DefaultFairnessHandlerTime = 5 * time.Millisecond
)

// FairnessConfig configures Fairness: tenant A submits ATasks tasks
// (fairness key "A"), then, once the orchestrator took them all in (they
// are ready, waiting for the executor), tenant B submits BTasks at the same
// priority (fairness key "B"). It runs twice, each time
// on a fresh embedded server: with fairness (the orchestrator's default
// window) and without (FairWindow -1).
type FairnessConfig struct {
	// URL of a NATS server; empty starts an embedded one per run. With a
	// URL both runs share its streams, and no other orchestrator may run.
	URL         string
	NATSOptions []nats.Option
	// ATasks is tenant A's tasks (default 100,000), BTasks tenant B's
	// (default 100).
	ATasks, BTasks int
	// BBatch is the size of B's SubmitMany calls, made one after the
	// other (default 25). Up to 32 specs go to the orchestrators directly
	// and become ready at once; a larger batch goes to the submission
	// queue of its priority and type, behind whatever of A's submissions
	// the orchestrators have not taken in yet, which fairness (it orders
	// dispatches) does not reorder.
	BBatch int
	// Capacity of the executor (default 16) and HandlerTime, how long the
	// handler takes per task (default 5ms; negative: a no-op): together
	// they make the executor the bottleneck, so that A's backlog waits as
	// ready tasks rather than as submissions.
	Capacity    float64
	HandlerTime time.Duration
	// Stall ends a run with an error when no task finished for that long.
	// Default 2 minutes.
	Stall  time.Duration
	Logger *zerolog.Logger
}

// FairnessRun is one run's figures.
type FairnessRun struct {
	// Fair is whether fairness was on, and Window the orchestrator's
	// FairWindow (-1: off).
	Fair   bool `json:"fair"`
	Window int  `json:"fair_window"`
	// BBatch is the size of B's SubmitMany calls.
	BBatch int `json:"b_batch"`
	// Capacity is the executor's and HandlerTime the handler's time per
	// task.
	Capacity    float64       `json:"capacity"`
	HandlerTime time.Duration `json:"handler_time"`
	// ATasks and BTasks were submitted; ASucceeded and BSucceeded
	// succeeded, Failed ended otherwise.
	ATasks     int `json:"a_tasks"`
	BTasks     int `json:"b_tasks"`
	ASucceeded int `json:"a_succeeded"`
	BSucceeded int `json:"b_succeeded"`
	Failed     int `json:"failed"`
	// AElapsed is from A's first submission to A's last success, and
	// ATasksPerSec A's throughput over it.
	AElapsed     time.Duration `json:"a_elapsed"`
	ATasksPerSec float64       `json:"a_tasks_per_sec"`
	// ABacklog is how many of A's tasks had not succeeded when B submitted,
	// and where they were: ASubmitQueued submissions not yet taken in
	// (AX_SUBMIT, which fairness does not reorder), AFairQueued ready
	// tasks queued for fairness in the orchestrator, AReadyPending
	// dispatches not yet acknowledged (AX_READY, started or not).
	ABacklog      int `json:"a_backlog"`
	ASubmitQueued int `json:"a_submit_queued"`
	AFairQueued   int `json:"a_fair_queued"`
	AReadyPending int `json:"a_ready_pending"`
	// BSubmitToStart is B's submit → handler start, and ASubmitToStart A's.
	BSubmitToStart Percentiles `json:"b_submit_to_start"`
	ASubmitToStart Percentiles `json:"a_submit_to_start"`
	// BAllDone is from B's submission to B's last success.
	BAllDone time.Duration `json:"b_all_done"`
}

// FairnessResult is both runs' figures.
type FairnessResult struct {
	With    FairnessRun `json:"with"`
	Without FairnessRun `json:"without"`
	// ThroughputCost is A's throughput lost to fairness, in % of its
	// throughput without (negative: it gained).
	ThroughputCost float64 `json:"throughput_cost_pct"`
}

// Fairness runs the fairness scenario with and without fairness.
func Fairness(ctx context.Context, cfg FairnessConfig) (FairnessResult, error) {
	var res FairnessResult
	if cfg.ATasks <= 0 {
		cfg.ATasks = DefaultFairnessATasks
	}
	if cfg.BTasks <= 0 {
		cfg.BTasks = DefaultFairnessBTasks
	}
	if cfg.BBatch <= 0 {
		cfg.BBatch = DefaultFairnessBBatch
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultFairnessCapacity
	}
	if cfg.HandlerTime == 0 {
		cfg.HandlerTime = DefaultFairnessHandlerTime
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 2 * time.Minute
	}
	var err error
	if res.With, err = fairnessRun(ctx, cfg, orchestrator.DefaultFairWindow); err != nil {
		return res, fmt.Errorf("bench: fairness on: %w", err)
	}
	if res.Without, err = fairnessRun(ctx, cfg, -1); err != nil {
		return res, fmt.Errorf("bench: fairness off: %w", err)
	}
	if w := res.Without.ATasksPerSec; w > 0 {
		res.ThroughputCost = 100 * (w - res.With.ATasksPerSec) / w
	}
	return res, nil
}

// fairPayload is a fairness task's payload: its submit time and tenant.
type fairPayload struct {
	SubmitNanos int64  `json:"t"`
	Tenant      string `json:"k"`
}

// fairTracker follows one fairness run's tasks.
type fairTracker struct {
	mu             sync.Mutex
	total          int
	started        map[string]bool
	aStart, bStart []time.Duration
	ended          map[string]bool
	aDone, bDone   int
	failed         int
	aLast, bLast   time.Time
	progress       time.Time
	all            chan struct{}
}

func (f *fairTracker) start(id string, p fairPayload) {
	d := time.Since(time.Unix(0, p.SubmitNanos))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started[id] {
		return
	}
	f.started[id] = true
	if p.Tenant == "B" {
		f.bStart = append(f.bStart, d)
	} else {
		f.aStart = append(f.aStart, d)
	}
}

func (f *fairTracker) end(o outcome) {
	var p fairPayload
	if json.Unmarshal(o.Payload, &p) != nil || p.Tenant == "" {
		return // not the scenario's
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended[o.ID] {
		return
	}
	f.ended[o.ID] = true
	f.progress = time.Now()
	switch {
	case o.State != task.Succeeded:
		f.failed++
	case p.Tenant == "B":
		f.bDone++
		f.bLast = o.At
	default:
		f.aDone++
		f.aLast = o.At
	}
	if len(f.ended) == f.total {
		close(f.all)
	}
}

// wait waits until every task ended, ctx ends or nothing ended for stall.
func (f *fairTracker) wait(ctx context.Context, stall time.Duration) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.all:
			return nil
		case <-ctx.Done():
			f.mu.Lock()
			defer f.mu.Unlock()
			return fmt.Errorf("%d of %d tasks unfinished: %w", f.total-len(f.ended), f.total, ctx.Err())
		case <-t.C:
			f.mu.Lock()
			since, left := time.Since(f.progress), f.total-len(f.ended)
			f.mu.Unlock()
			if since > stall {
				return fmt.Errorf("%d of %d tasks unfinished and none ended for %s", left, f.total, stall.Round(time.Second))
			}
		}
	}
}

// fairSpecs returns n specs of tenant, ids prefix<seq>.
func fairSpecs(n int, prefix, tenant string, seq *int) []task.Spec {
	out := make([]task.Spec, n)
	for i := range out {
		*seq++
		s, _ := task.New(TypeFair, nil)
		s.ID = prefix + strconv.Itoa(*seq)
		s.FairnessKey = tenant
		s.Payload = []byte(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `,"k":"` + tenant + `"}`)
		out[i] = s
	}
	return out
}

// fairnessRun is one run on its own server with the given FairWindow.
func fairnessRun(ctx context.Context, cfg FairnessConfig, window int) (FairnessRun, error) {
	run := FairnessRun{Fair: window > 0, Window: window, BBatch: cfg.BBatch, Capacity: cfg.Capacity, HandlerTime: cfg.HandlerTime, ATasks: cfg.ATasks, BTasks: cfg.BTasks}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	url, stop, err := embeddedServer(cfg.URL, "ax-bench-fair-")
	if err != nil {
		return run, err
	}
	defer stop()
	total := cfg.ATasks + cfg.BTasks
	tr := &fairTracker{total: total, started: make(map[string]bool, total), ended: make(map[string]bool, total),
		progress: time.Now(), all: make(chan struct{})}
	st, err := startStack(ctx, stackConfig{url: url, opts: cfg.NATSOptions, topo: orchestrator.TopologyOptions{Replicas: 1},
		capacity: cfg.Capacity, orchestrators: 1, log: log,
		orch: func(c *orchestrator.Config) { c.FairWindow = window },
		register: func(ex *executor.Executor) {
			ex.HandleFunc(TypeFair, func(ctx context.Context, j *executor.Job) (any, error) {
				var p fairPayload
				if json.Unmarshal(j.Payload, &p) == nil && p.SubmitNanos > 0 {
					tr.start(j.ID, p)
				}
				if cfg.HandlerTime > 0 { // negative: a no-op
					t := time.NewTimer(cfg.HandlerTime)
					defer t.Stop()
					select {
					case <-t.C:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				return nil, nil
			})
		}})
	if err != nil {
		return run, err
	}
	defer st.close()
	wnc, err := st.connect()
	if err != nil {
		return run, err
	}
	stopWatch, err := watchOutcomes(ctx, wnc, tr.end)
	if err != nil {
		return run, err
	}
	defer stopWatch()
	cnc, err := st.connect()
	if err != nil {
		return run, err
	}
	client, err := sdk.New(ctx, cnc)
	if err != nil {
		return run, err
	}

	prefix := fmt.Sprintf("fair-%d-", time.Now().UnixNano())
	seq := 0
	begin := time.Now()
	const chunk = 1000
	for sent := 0; sent < cfg.ATasks; sent += chunk {
		if _, err := client.SubmitMany(ctx, fairSpecs(min(chunk, cfg.ATasks-sent), prefix+"a-", "A", &seq)); err != nil {
			return run, fmt.Errorf("submit A's tasks: %w", err)
		}
	}
	// B submits once A's submissions are all taken in: A's backlog is
	// then ready tasks (in AX_READY or queued for fairness), which is
	// what fairness orders; submissions still queued in AX_SUBMIT it does
	// not reorder.
	for {
		if n, _ := fairBacklog(ctx, cnc); n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	tr.mu.Lock()
	run.ABacklog = cfg.ATasks - tr.aDone
	tr.mu.Unlock()
	run.AFairQueued = int(st.counts[0].fairQueued.Load())
	run.ASubmitQueued, run.AReadyPending = fairBacklog(ctx, cnc)
	bSubmit := time.Now()
	for sent := 0; sent < cfg.BTasks; sent += cfg.BBatch {
		if _, err := client.SubmitMany(ctx, fairSpecs(min(cfg.BBatch, cfg.BTasks-sent), prefix+"b-", "B", &seq)); err != nil {
			return run, fmt.Errorf("submit B's tasks: %w", err)
		}
	}
	if err := tr.wait(ctx, cfg.Stall); err != nil {
		return run, err
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	run.ASucceeded, run.BSucceeded, run.Failed = tr.aDone, tr.bDone, tr.failed
	if run.ASucceeded > 0 {
		run.AElapsed = tr.aLast.Sub(begin)
		run.ATasksPerSec = float64(run.ASucceeded) / run.AElapsed.Seconds()
	}
	if run.BSucceeded > 0 {
		run.BAllDone = tr.bLast.Sub(bSubmit)
	}
	run.ASubmitToStart = percentiles(tr.aStart)
	run.BSubmitToStart = percentiles(tr.bStart)
	if run.Failed > 0 {
		return run, errors.New("tasks failed: " + strconv.Itoa(run.Failed))
	}
	return run, nil
}

// fairBacklog returns the submissions of the default lane not yet taken in
// and the dispatches of the default capability and priority not yet
// acknowledged (-1 where not read).
func fairBacklog(ctx context.Context, nc *nats.Conn) (submits, dispatches int) {
	submits, dispatches = -1, -1
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	prio := task.DefaultPriority
	if st, err := js.Stream(ctx, subject.StreamSubmit); err == nil {
		if n, err := queue.Pending(ctx, st, subject.ConsumerSubmitLane(prio), subject.SubmitLaneAll(prio)); err == nil {
			submits = int(n)
		}
	}
	if levels, err := queue.ReadyLevels(ctx, js, time.Now()); err == nil {
		for _, lv := range levels {
			if lv.Capability == task.DefaultCapability && lv.Priority == prio {
				dispatches = int(lv.Pending + lv.InHand)
			}
		}
	}
	return
}
