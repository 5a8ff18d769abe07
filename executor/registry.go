package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/clip"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// The workers registry (subject.BucketWorkers): while it runs, an
// executor announces itself — id, capabilities, handled types, capacity,
// the handlers running now and since when, their progress, its version —
// in its own key, with a TTL of three announce intervals. It writes the
// announcement when it starts, within announceGap of a handler starting
// or ending or reporting progress, and every AnnounceInterval otherwise;
// a clean Stop purges the key. None of this is on a task's path: the
// handler's start only updates memory, and the announcement is written by
// the registry's own goroutine, at most once per announceGap however busy
// the executor is.

// DefaultAnnounceInterval is Config.AnnounceInterval's default.
const DefaultAnnounceInterval = 5 * time.Second

// announceGap is the shortest time between two announcements: the bound
// on how late a handler that started shows as running, and on how often a
// busy executor writes its announcement.
const announceGap = 250 * time.Millisecond

// registry keeps an executor's announcement; it outlives sessions (Start
// after Stop starts it again).
type registry struct {
	e *Executor

	mu      sync.Mutex
	running map[string]*task.WorkerExecution // by task id and execution id
	changed chan struct{}                    // capacity 1: a change to announce

	// runMu guards the announcing goroutine's lifecycle.
	runMu     sync.Mutex
	cancel    context.CancelFunc
	done      chan struct{}
	startedAt time.Time
}

func newRegistry(e *Executor) *registry {
	return &registry{e: e, running: make(map[string]*task.WorkerExecution), changed: make(chan struct{}, 1)}
}

// on reports whether announcements are configured (AnnounceInterval ≥ 0).
func (r *registry) on() bool { return r.e.cfg.AnnounceInterval > 0 }

// key is the executor's key in the registry.
func (r *registry) key() string { return subject.WorkerKey(r.e.cfg.Capabilities[0], r.e.cfg.ID) }

// ttl is how long an announcement lives: three intervals, in whole
// seconds (message TTLs are), at least one.
func (r *registry) ttl() time.Duration {
	return max(time.Second, (3 * r.e.cfg.AnnounceInterval).Truncate(time.Second))
}

// poke asks for an announcement soon (at most one is pending).
func (r *registry) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// start starts announcing (non-blocking; a no-op when it runs or is off).
func (r *registry) start() {
	if !r.on() {
		return
	}
	r.runMu.Lock()
	defer r.runMu.Unlock()
	if r.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done, r.startedAt = cancel, make(chan struct{}), r.e.cfg.Now().UTC()
	go r.run(ctx, r.done)
}

// stop ends the announcing goroutine and removes the executor's key,
// bounded by ctx; a no-op when it does not run.
func (r *registry) stop(ctx context.Context) {
	r.runMu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.runMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done // its writes are bounded by their own timeouts
	kv, err := r.e.js.KeyValue(ctx, subject.BucketWorkers)
	if err == nil {
		err = kv.Purge(ctx, r.key(), jetstream.PurgeTTL(time.Minute))
	}
	if err != nil {
		r.e.log.Debug("workers registry: announcement not removed (it expires)", "error", err)
	}
}

// run announces at once, then on every change (at most once per
// announceGap) and every AnnounceInterval, until ctx ends.
func (r *registry) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	beat := time.NewTimer(0)
	defer beat.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
		case <-r.changed:
		}
		if err := r.announce(ctx); err != nil && ctx.Err() == nil {
			// Announcing is for operators: a user without the right (an
			// old permission set) only makes the executor invisible.
			if !warned {
				r.e.log.Warn("workers registry: announcement not written; the executor does not show in `ax workers`", "error", err)
				warned = true
			}
		} else {
			warned = false
		}
		beat.Reset(r.e.cfg.AnnounceInterval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(announceGap):
		}
	}
}

// announce writes the executor's announcement with its TTL.
func (r *registry) announce(ctx context.Context) error {
	data, err := json.Marshal(r.snapshot())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = r.e.js.Publish(ctx, subject.KVKey(subject.BucketWorkers, r.key()), data, jetstream.WithMsgTTL(r.ttl()))
	return err
}

// snapshot is the executor's announcement now.
func (r *registry) snapshot() task.Worker {
	e := r.e
	host, _ := os.Hostname()
	r.runMu.Lock()
	started := r.startedAt
	r.runMu.Unlock()
	w := task.Worker{ID: e.cfg.ID, Capabilities: slices.Clone(e.cfg.Capabilities), Types: e.handledTypes(),
		Capacity: e.cfg.Capacity, InFlight: e.InFlight(), Version: moduleVersion(), Host: host, PID: os.Getpid(),
		StartedAt: started, HeartbeatAt: e.cfg.Now().UTC(), TTL: task.Duration(r.ttl())}
	r.mu.Lock()
	w.Running = make([]task.WorkerExecution, 0, len(r.running))
	for _, x := range r.running {
		c := *x
		if x.Progress != nil {
			p := *x.Progress
			c.Progress = &p
		}
		w.Running = append(w.Running, c)
	}
	r.mu.Unlock()
	slices.SortFunc(w.Running, func(a, b task.WorkerExecution) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.TaskID, b.TaskID))
	})
	w.RunningTotal = len(w.Running)
	if len(w.Running) > task.MaxWorkerRunning {
		w.Running = w.Running[:task.MaxWorkerRunning]
	}
	return w
}

// track runs an attempt (run: the hooks and the handler) while it is
// listed as running, and gives its job a progress reporter.
func (r *registry) track(ctx context.Context, job *Job, run func(context.Context) error) error {
	x := &task.WorkerExecution{TaskID: job.ID, ExecutionID: job.ExecutionID, Type: job.Type, Capability: job.Capability,
		Attempt: job.Attempt, Phase: job.Phase, Since: r.e.cfg.Now().UTC()}
	k := job.ID + "\x00" + job.ExecutionID + "\x00" + job.Phase
	r.mu.Lock()
	r.running[k] = x
	r.mu.Unlock()
	job.progress = func(percent float64, message string) {
		p := &task.Progress{Percent: min(max(percent, 0), 100), Message: clip.Bytes(message, task.MaxProgressMessage), At: r.e.cfg.Now().UTC()}
		r.mu.Lock()
		x.Progress = p
		r.mu.Unlock()
		r.poke()
	}
	r.poke()
	defer func() {
		r.mu.Lock()
		delete(r.running, k)
		r.mu.Unlock()
		r.poke()
	}()
	return run(ctx)
}

// handledTypes lists the task types with a handler, sorted.
func (e *Executor) handledTypes() []string {
	e.handlersMu.RLock()
	defer e.handlersMu.RUnlock()
	out := make([]string, 0, len(e.handlers))
	for t := range e.handlers {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// moduleVersion is the version of the AX module in this binary: the main
// module's when AX is built itself, else the dependency's.
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	const path = "github.com/ax-run/ax"
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}

// Progress reports how far the attempt has come: percent (clamped to
// 0–100) and a short message (at most task.MaxProgressMessage bytes). It
// only updates memory: the executor carries the last report in its
// announcement in the workers registry, written at most every quarter
// second however often Progress is called, and `ax status` and the
// console's task page show it live. No task record is written. It does
// nothing on a Job not made by an executor, or when the executor's
// announcements are off (Config.AnnounceInterval < 0).
func (j *Job) Progress(_ context.Context, percent float64, message string) {
	if j.progress != nil {
		j.progress(percent, message)
	}
}
