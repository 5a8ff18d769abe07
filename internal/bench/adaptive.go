package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TypeDownstream is the task type of the adaptive scenario: a call to a
// simulated downstream that answers 429 beyond its capacity.
const TypeDownstream = "bench.downstream"

// DownstreamKey is the adaptive scenario's concurrency key.
const DownstreamKey = "downstream"

// Defaults of AdaptiveConfig.
const (
	DefaultAdaptiveTasks       = 5_000
	DefaultAdaptiveConcurrency = 64
	DefaultDownstreamCapacity  = 20
	DefaultDownstreamCall      = 100 * time.Millisecond
	DefaultDownstreamBackoff   = 100 * time.Millisecond
	DefaultAdaptiveSample      = 250 * time.Millisecond
)

// AdaptiveConfig configures Adaptive: Tasks tasks under the concurrency
// key "downstream", limited to Concurrency, call a simulated downstream
// that serves DownstreamCapacity calls at once, each taking CallTime, and
// answers any call beyond with a 429 (executor.RetryAfter(Backoff)). It
// runs twice, each time on a fresh embedded server: with the limit
// adaptive (AIMD between 1 and Concurrency) and fixed at Concurrency.
//
// The per-type circuit breaker and retry budget, which would act on the
// 429s too, are off in both runs: the key limit alone is measured.
type AdaptiveConfig struct {
	// URL of a NATS server; empty starts an embedded one per run. With a
	// URL both runs share its streams, and no other orchestrator may run.
	URL         string
	NATSOptions []nats.Option
	// Tasks to run (default 5,000), each with MaxRetries retries (default
	// task.MaxRetriesLimit).
	Tasks      int
	MaxRetries int
	// Concurrency is the key's limit: its ceiling when adaptive (default 64).
	Concurrency int
	// DownstreamCapacity (default 20), CallTime (default 100ms) and Backoff,
	// the 429's Retry-After (default 100ms), describe the downstream.
	DownstreamCapacity int
	CallTime           time.Duration
	Backoff            time.Duration
	// Capacity of the executor, high enough that the limit binds (default
	// 2 × Concurrency).
	Capacity float64
	// Sample is how often the limit and rates are sampled (default 250ms).
	Sample time.Duration
	// Stall ends a run with an error when no task finished for that long.
	// Default 2 minutes.
	Stall  time.Duration
	Logger *zerolog.Logger
}

// AdaptiveSample is one sample of a run.
type AdaptiveSample struct {
	// T is the time since the first submission.
	T time.Duration `json:"t"`
	// Limit is the key's limit in force (the adaptive value, or the fixed
	// concurrency) and InUse the slots held (dispatched or running).
	Limit float64 `json:"limit"`
	InUse int     `json:"in_use"`
	// DonePerSec is successes per second and RejectedPerSec 429s per
	// second since the previous sample.
	DonePerSec     float64 `json:"done_per_sec"`
	RejectedPerSec float64 `json:"rejected_per_sec"`
}

// AdaptiveRun is one run's figures.
type AdaptiveRun struct {
	Adaptive  bool `json:"adaptive"`
	Tasks     int  `json:"tasks"`
	Succeeded int  `json:"succeeded"`
	Failed    int  `json:"failed"`
	// Elapsed is from the first submission to the last success, and
	// TasksPerSec the throughput over it.
	Elapsed     time.Duration `json:"elapsed"`
	TasksPerSec float64       `json:"tasks_per_sec"`
	// Rejected is the 429s the downstream answered, and RejectedPerTask
	// per task.
	Rejected        int64   `json:"rejected"`
	RejectedPerTask float64 `json:"rejected_per_task"`
	// LimitMedian is the limit's median over the second half of the
	// samples taken while slots were held.
	LimitMedian float64 `json:"limit_median"`
	// DownstreamPeak is the most calls the downstream saw at once,
	// rejected ones included.
	DownstreamPeak int64            `json:"downstream_peak"`
	Samples        []AdaptiveSample `json:"samples"`
}

// AdaptiveResult is both runs' figures.
type AdaptiveResult struct {
	Concurrency        int           `json:"concurrency"`
	DownstreamCapacity int           `json:"downstream_capacity"`
	CallTime           time.Duration `json:"call_time"`
	// Backoff is the 429's Retry-After.
	Backoff time.Duration `json:"backoff"`
	// Ideal is the downstream's capacity in calls/s (capacity / call time).
	Ideal    float64     `json:"ideal_per_sec"`
	Adaptive AdaptiveRun `json:"adaptive"`
	Fixed    AdaptiveRun `json:"fixed"`
}

// Adaptive runs the adaptive scenario with an adaptive and a fixed limit.
func Adaptive(ctx context.Context, cfg AdaptiveConfig) (AdaptiveResult, error) {
	if cfg.Tasks <= 0 {
		cfg.Tasks = DefaultAdaptiveTasks
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = task.MaxRetriesLimit
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultAdaptiveConcurrency
	}
	if cfg.DownstreamCapacity <= 0 {
		cfg.DownstreamCapacity = DefaultDownstreamCapacity
	}
	if cfg.CallTime <= 0 {
		cfg.CallTime = DefaultDownstreamCall
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultDownstreamBackoff
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = float64(2 * cfg.Concurrency)
	}
	if cfg.Sample <= 0 {
		cfg.Sample = DefaultAdaptiveSample
	}
	if cfg.Stall <= 0 {
		cfg.Stall = 2 * time.Minute
	}
	res := AdaptiveResult{Concurrency: cfg.Concurrency, DownstreamCapacity: cfg.DownstreamCapacity, CallTime: cfg.CallTime,
		Backoff: cfg.Backoff, Ideal: float64(cfg.DownstreamCapacity) / cfg.CallTime.Seconds()}
	var err error
	if res.Adaptive, err = adaptiveRun(ctx, cfg, true); err != nil {
		return res, fmt.Errorf("bench: adaptive limit: %w", err)
	}
	if res.Fixed, err = adaptiveRun(ctx, cfg, false); err != nil {
		return res, fmt.Errorf("bench: fixed limit: %w", err)
	}
	return res, nil
}

// downstream simulates a service serving capacity calls at once.
type downstream struct {
	capacity int64
	call     time.Duration
	backoff  time.Duration
	inFlight atomic.Int64
	peak     atomic.Int64
	rejected atomic.Int64
	accepted atomic.Int64
}

var errTooMany = errors.New("429 too many requests")

func (d *downstream) handle(ctx context.Context, _ *executor.Job) (any, error) {
	n := d.inFlight.Add(1)
	for p := d.peak.Load(); n > p && !d.peak.CompareAndSwap(p, n); p = d.peak.Load() {
	}
	if n > d.capacity {
		d.inFlight.Add(-1)
		d.rejected.Add(1)
		return nil, executor.RetryAfter(d.backoff, errTooMany)
	}
	t := time.NewTimer(d.call)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		d.inFlight.Add(-1)
		return nil, ctx.Err()
	}
	d.inFlight.Add(-1)
	d.accepted.Add(1)
	return nil, nil
}

// adaptiveRun is one run on its own server.
func adaptiveRun(ctx context.Context, cfg AdaptiveConfig, adaptive bool) (AdaptiveRun, error) {
	run := AdaptiveRun{Adaptive: adaptive, Tasks: cfg.Tasks}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	url, stop, err := embeddedServer(cfg.URL, "ax-bench-adaptive-")
	if err != nil {
		return run, err
	}
	defer stop()
	ds := &downstream{capacity: int64(cfg.DownstreamCapacity), call: cfg.CallTime, backoff: cfg.Backoff}
	limit := task.KeyLimit{Key: DownstreamKey, Concurrency: cfg.Concurrency, Adaptive: adaptive}
	st, err := startStack(ctx, stackConfig{url: url, opts: cfg.NATSOptions, topo: orchestrator.TopologyOptions{Replicas: 1},
		capacity: cfg.Capacity, orchestrators: 1, log: log,
		orch: func(c *orchestrator.Config) {
			c.KeyLimits = []task.KeyLimit{limit}
			c.Breaker = orchestrator.BreakerConfig{Threshold: 1}                           // off
			c.RetryBudget = orchestrator.RetryBudget{Limit: 1_000_000, Width: time.Second} // never binds
		},
		register: func(ex *executor.Executor) { ex.HandleFunc(TypeDownstream, ds.handle) }})
	if err != nil {
		return run, err
	}
	defer st.close()
	cnc, err := st.connect()
	if err != nil {
		return run, err
	}
	js, err := jetstream.New(cnc)
	if err != nil {
		return run, err
	}
	slots, err := js.KeyValue(ctx, subject.BucketSlots)
	if err != nil {
		return run, fmt.Errorf("open %s: %w", subject.BucketSlots, err)
	}
	// A URL's server may hold the key's adaptive value of an earlier run.
	if cfg.URL != "" {
		if err := slots.Purge(ctx, DownstreamKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return run, fmt.Errorf("reset the slots of key %s: %w", DownstreamKey, err)
		}
	}

	prefix := fmt.Sprintf("downstream-%d-", time.Now().UnixNano())
	var mu sync.Mutex
	ended := make(map[string]bool, cfg.Tasks)
	succeeded, failed := 0, 0
	var last time.Time
	progress := time.Now()
	all := make(chan struct{})
	wnc, err := st.connect()
	if err != nil {
		return run, err
	}
	stopWatch, err := watchOutcomes(ctx, wnc, func(o outcome) {
		if len(o.ID) < len(prefix) || o.ID[:len(prefix)] != prefix {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if ended[o.ID] {
			return
		}
		ended[o.ID] = true
		progress = time.Now()
		if o.State == task.Succeeded {
			succeeded++
			last = o.At
		} else {
			failed++
		}
		if len(ended) == cfg.Tasks {
			close(all)
		}
	})
	if err != nil {
		return run, err
	}
	defer stopWatch()
	client, err := sdk.New(ctx, cnc)
	if err != nil {
		return run, err
	}

	// sample reads the key's slots and the rates since the previous sample.
	var prevDone int
	var prevRejected int64
	prevAt := time.Now()
	begin := prevAt
	sample := func() {
		now := time.Now()
		s := AdaptiveSample{T: now.Sub(begin), Limit: float64(cfg.Concurrency)}
		if e, err := slots.Get(ctx, DownstreamKey); err == nil {
			var v task.Slots
			if json.Unmarshal(e.Value(), &v) == nil {
				s.InUse = len(v.Holders)
				if adaptive && v.Limit > 0 {
					s.Limit = v.Limit
				}
			}
		}
		mu.Lock()
		done := succeeded
		mu.Unlock()
		rejected := ds.rejected.Load()
		if dt := now.Sub(prevAt).Seconds(); dt > 0 {
			s.DonePerSec = float64(done-prevDone) / dt
			s.RejectedPerSec = float64(rejected-prevRejected) / dt
		}
		prevDone, prevRejected, prevAt = done, rejected, now
		run.Samples = append(run.Samples, s)
	}

	seq := 0
	const chunk = 1000
	for sent := 0; sent < cfg.Tasks; sent += chunk {
		batch := make([]task.Spec, min(chunk, cfg.Tasks-sent))
		for i := range batch {
			seq++
			s, _ := task.New(TypeDownstream, nil)
			s.ID = prefix + strconv.Itoa(seq)
			s.ConcurrencyKey = DownstreamKey
			s.MaxRetries = new(cfg.MaxRetries)
			batch[i] = s
		}
		if _, err := client.SubmitMany(ctx, batch); err != nil {
			return run, fmt.Errorf("submit: %w", err)
		}
	}
	tick := time.NewTicker(cfg.Sample)
	defer tick.Stop()
wait:
	for {
		select {
		case <-all:
			break wait
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return run, fmt.Errorf("%d of %d tasks unfinished: %w", cfg.Tasks-len(ended), cfg.Tasks, ctx.Err())
		case <-tick.C:
			sample()
			mu.Lock()
			since, left := time.Since(progress), cfg.Tasks-len(ended)
			mu.Unlock()
			if since > cfg.Stall {
				return run, fmt.Errorf("%d of %d tasks unfinished and none ended for %s", left, cfg.Tasks, cfg.Stall.Round(time.Second))
			}
		}
	}
	sample()
	mu.Lock()
	run.Succeeded, run.Failed = succeeded, failed
	if succeeded > 0 {
		run.Elapsed = last.Sub(begin)
		run.TasksPerSec = float64(succeeded) / run.Elapsed.Seconds()
	}
	mu.Unlock()
	run.Rejected = ds.rejected.Load()
	run.RejectedPerTask = float64(run.Rejected) / float64(cfg.Tasks)
	run.DownstreamPeak = ds.peak.Load()
	// The second half of the samples taken while slots were held (a run
	// may idle at its end, its limit frozen, waiting for a straggler).
	busy := make([]AdaptiveSample, 0, len(run.Samples))
	for _, s := range run.Samples {
		if s.InUse > 0 {
			busy = append(busy, s)
		}
	}
	if len(busy) == 0 {
		busy = run.Samples
	}
	var half []float64
	for _, s := range busy[len(busy)/2:] {
		half = append(half, s.Limit)
	}
	run.LimitMedian = median(half)
	if failed > 0 {
		return run, fmt.Errorf("%d of %d tasks failed", failed, cfg.Tasks)
	}
	return run, nil
}
