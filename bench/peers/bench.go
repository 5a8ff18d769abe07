package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Config is one run's workload, the same shape as `ax bench`'s.
type Config struct {
	// Tasks for the throughput phase, submitted as fast as possible. 0 skips it.
	Tasks int
	// Rate (jobs/s) and Duration of the steady phase. 0 skips it.
	Rate     int
	Duration time.Duration
	// Workers is how many jobs may run at once (River MaxWorkers, Asynq
	// Concurrency), as `ax bench --capacity`.
	Workers int
}

// chunk is how many jobs one batch insert carries in the throughput
// phase, as `ax bench`'s SubmitMany chunks.
const chunk = 1000

// tick is the steady phase's submission period, as `ax bench`'s.
const tick = 10 * time.Millisecond

// Result is one system's figures.
type Result struct {
	System  string `json:"system"`
	Version string `json:"version"`
	// Durability is what the server was configured with, read from it.
	Durability Durability `json:"durability"`
	// Store names where the run kept its jobs: a database, or a Redis
	// database and queue, removed after the run.
	Store string `json:"store"`
	// Tuning says how the system was set up for the run.
	Tuning string `json:"tuning"`
	// Notes qualify the figures (what "done" means for the system).
	Notes  []string `json:"notes,omitempty"`
	Phases []Phase  `json:"phases"`
	// Checked says what was verified in the store after the run.
	Checked string `json:"checked"`
	// Reruns is how many jobs of the run a worker started more than once.
	Reruns int `json:"reruns"`
}

// Durability is the server settings that decide what survives a crash.
type Durability struct {
	Server   string            `json:"server"`
	Settings map[string]string `json:"settings"`
	// Durable is true when an acknowledged job survives a machine crash.
	Durable bool   `json:"durable"`
	Summary string `json:"summary"`
}

// Phase holds one phase's figures; the JSON names are `ax bench`'s.
type Phase struct {
	Name          string        `json:"name"`
	Tasks         int           `json:"tasks"`
	Elapsed       time.Duration `json:"elapsed"`
	TasksPerSec   float64       `json:"tasks_per_sec"`
	SubmitToStart Percentiles   `json:"submit_to_start"`
	SubmitToDone  Percentiles   `json:"submit_to_done"`
	// Started is how many of the phase's jobs a worker started; Reruns how
	// many extra starts there were (a job started more than once).
	Started int `json:"started"`
	Reruns  int `json:"reruns"`
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

// args is every job's payload: its id and its submit time.
type args struct {
	ID          string `json:"id"`
	SubmitNanos int64  `json:"t"`
}

// driver is a queue under test: it submits jobs and reports their starts
// and completions to the current recorder.
type driver interface {
	// submit hands the jobs of ids to the system, each stamped with its
	// submit time just before, and returns once the system accepted them all.
	submit(ctx context.Context, ids []string) error
	// settle returns once the system has stored the completion of every
	// job whose handler returned, and the time it saw that.
	settle(ctx context.Context) (time.Time, error)
}

// recorder collects one phase's latencies, keyed by job id.
type recorder struct {
	mu      sync.Mutex
	start   []time.Duration
	done    []time.Duration
	pending map[string]bool
	starts  map[string]int
	// submitting is true until every job of the phase was submitted.
	submitting bool
	allDone    chan struct{}
	closeOnce  sync.Once
	last       time.Time
}

func newRecorder(n int) *recorder {
	return &recorder{pending: make(map[string]bool, n), starts: make(map[string]int, n), submitting: true, allDone: make(chan struct{})}
}

func (r *recorder) expect(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		r.pending[id] = true
		r.starts[id] = 0
	}
}

func (r *recorder) doneSubmitting() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submitting = false
	r.checkDone()
}

// checkDone closes allDone once everything submitted is done. Call with mu held.
func (r *recorder) checkDone() {
	if !r.submitting && len(r.pending) == 0 {
		r.closeOnce.Do(func() { close(r.allDone) })
	}
}

// started records a worker entering a job's handler at now.
func (r *recorder) started(a args, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.starts[a.ID]
	if !ok {
		return // another phase's job
	}
	r.starts[a.ID] = n + 1
	if n == 0 {
		r.start = append(r.start, now.Sub(time.Unix(0, a.SubmitNanos)))
	}
}

// finished records a job's completion at at.
func (r *recorder) finished(a args, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending[a.ID] {
		return
	}
	delete(r.pending, a.ID)
	r.done = append(r.done, at.Sub(time.Unix(0, a.SubmitNanos)))
	if at.After(r.last) {
		r.last = at
	}
	r.checkDone()
}

// current holds the running phase's recorder, read by the workers, and
// counts the starts of every job of the run.
type current struct {
	mu     sync.Mutex
	r      *recorder
	starts map[string]int
}

// onceText says whether every job ran exactly once.
func onceText(jobs, extra int) string {
	if jobs == 0 {
		return "every job ran exactly once"
	}
	return fmt.Sprintf("%d jobs ran more than once (%d extra runs)", jobs, extra)
}

// reruns returns how many jobs of the whole run started more than once,
// and the extra starts.
func (c *current) reruns() (jobs, extra int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.starts {
		if n > 1 {
			jobs++
			extra += n - 1
		}
	}
	return jobs, extra
}

func (c *current) get() *recorder {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.r
}

func (c *current) set(r *recorder) {
	c.mu.Lock()
	c.r = r
	c.mu.Unlock()
}

// started and finished pass an event to the running phase, if any.
func (c *current) started(a args, now time.Time) {
	c.mu.Lock()
	if c.starts == nil {
		c.starts = map[string]int{}
	}
	c.starts[a.ID]++
	c.mu.Unlock()
	if r := c.get(); r != nil {
		r.started(a, now)
	}
}

func (c *current) finished(a args, at time.Time) {
	if r := c.get(); r != nil {
		r.finished(a, at)
	}
}

// runPhases runs the throughput and steady phases of cfg against d.
func runPhases(ctx context.Context, d driver, cur *current, cfg Config) ([]Phase, error) {
	var phases []Phase
	if cfg.Tasks > 0 {
		p, err := throughput(ctx, d, cur, cfg.Tasks)
		if err != nil {
			return phases, fmt.Errorf("throughput phase: %w", err)
		}
		phases = append(phases, p)
	}
	if cfg.Rate > 0 && cfg.Duration > 0 {
		p, err := steady(ctx, d, cur, cfg.Rate, cfg.Duration)
		if err != nil {
			return phases, fmt.Errorf("steady phase: %w", err)
		}
		phases = append(phases, p)
	}
	return phases, nil
}

// idSource names a phase's jobs.
type idSource struct {
	prefix string
	seq    int
}

func (s *idSource) next(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		s.seq++
		ids[i] = s.prefix + strconv.Itoa(s.seq)
	}
	return ids
}

// throughput submits n jobs as fast as possible in batches of chunk and
// measures from the first submission to the last stored completion.
func throughput(ctx context.Context, d driver, cur *current, n int) (Phase, error) {
	r := newRecorder(n)
	cur.set(r)
	src := idSource{prefix: fmt.Sprintf("throughput-%d-", time.Now().UnixNano())}
	begin := time.Now()
	for sent := 0; sent < n; sent += chunk {
		ids := src.next(min(chunk, n-sent))
		r.expect(ids)
		if err := d.submit(ctx, ids); err != nil {
			return Phase{}, err
		}
	}
	r.doneSubmitting()
	end, err := wait(ctx, d, r, n)
	if err != nil {
		return Phase{}, err
	}
	return phase("throughput", n, end.Sub(begin), r), nil
}

// steady submits rate jobs/s for dur, a batch every tick (catching up
// when a tick was late), as `ax bench`'s steady phase.
func steady(ctx context.Context, d driver, cur *current, rate int, dur time.Duration) (Phase, error) {
	total := int(float64(rate) * dur.Seconds())
	r := newRecorder(total)
	cur.set(r)
	src := idSource{prefix: fmt.Sprintf("steady-%d-", time.Now().UnixNano())}
	perTick := max(1, rate/int(time.Second/tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	begin := time.Now()
	for sent := 0; sent < total; {
		select {
		case <-ctx.Done():
			return Phase{}, ctx.Err()
		case <-t.C:
		}
		due := min(total, int(time.Since(begin).Seconds()*float64(rate))+perTick) - sent
		if due <= 0 {
			continue
		}
		ids := src.next(due)
		r.expect(ids)
		if err := d.submit(ctx, ids); err != nil {
			return Phase{}, err
		}
		sent += due
	}
	r.doneSubmitting()
	end, err := wait(ctx, d, r, total)
	if err != nil {
		return Phase{}, err
	}
	return phase(fmt.Sprintf("steady %d/s", rate), total, end.Sub(begin), r), nil
}

// wait returns once every job of r is done and the system settled: the
// later of the last completion and the settling.
func wait(ctx context.Context, d driver, r *recorder, n int) (time.Time, error) {
	select {
	case <-r.allDone:
	case <-ctx.Done():
		r.mu.Lock()
		left := len(r.pending)
		r.mu.Unlock()
		return time.Time{}, fmt.Errorf("%d of %d jobs unfinished: %w", left, n, ctx.Err())
	}
	settled, err := d.settle(ctx)
	if err != nil {
		return time.Time{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if settled.After(r.last) {
		return settled, nil
	}
	return r.last, nil
}

func phase(name string, n int, elapsed time.Duration, r *recorder) Phase {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Phase{
		Name: name, Tasks: n, Elapsed: elapsed,
		TasksPerSec:   float64(n) / elapsed.Seconds(),
		SubmitToStart: percentiles(r.start),
		SubmitToDone:  percentiles(r.done),
	}
	for _, k := range r.starts {
		if k > 0 {
			p.Started++
			p.Reruns += k - 1
		}
	}
	return p
}
