package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/direct"
	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/topology"
)

// Executor pulls ready tasks of its capabilities and runs their handlers.
// Register handlers with Handle (or HandleFunc, HandleTyped, HandleArgs,
// HandleShards), then Start. Stop drains it; Start may be called again
// after Stop.
type Executor struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	metrics Metrics
	// stall, set by tests only, stalls the run of a dispatch ("pulled":
	// before its claim; "claimed": after it, before the handler starts): a
	// process stopped, swapped out or starved of CPU while it holds one.
	stall func(at string)
	// The streams the executor uses, bound by the first Start and kept:
	// fanin reads shards' outcomes for aggregators; objects binds the
	// object stores of plans and large results, each capability's when
	// first used. (Task records are not read here: dispatches are the
	// ready records, and inputs are asked of the orchestrators. Leases
	// are only written here; the orchestrator reads them when it decides
	// a takeover.)
	fanin   *fanin.Markers
	objects *object.Stores
	// checked: AX's topology was found to exist (topology.Check), once:
	// a Start retrying under faults does not ask every stream again.
	checked bool

	handlersMu sync.RWMutex
	handlers   map[string]Handler
	// passed are the types of the dispatches passed on (pass.go).
	passed passed

	load *load
	// reporting holds a slot per attempt whose handler returned and whose
	// outcome is being reported and acknowledged (see execute).
	reporting chan struct{}
	// reports hands reports to the orchestrators in batch direct requests
	// (those that finish while one is in flight go together) before
	// storing them.
	reports *direct.Batcher
	// registry announces the executor in the workers registry (registry.go).
	registry *registry

	// startMu serialises Starts; mu guards the fields below it and is
	// never held while waiting on NATS, so Stop is never held up by Start.
	startMu sync.Mutex
	mu      sync.Mutex
	// sess is the running session (nil when not started); stopping the
	// one being stopped, which a second Stop waits for; cancelStart ends a
	// Start waiting for AX's streams.
	sess        *session
	stopping    *session
	cancelStart context.CancelFunc
}

// ErrStopped is returned, wrapped, by a Start that Stop interrupted while
// it waited for AX's streams.
var ErrStopped = errors.New("executor stopped")

// session is one Start…Stop of an executor: its pullers, the handlers they
// started and the cancel signals it listens to. A restart makes a new one,
// so handlers still running from an earlier session (a Stop that gave up
// on them) never mix with the new one's.
type session struct {
	// stopPulling ends the pullers.
	stopPulling context.CancelFunc
	// hardStop ends when Stop gives up waiting: reports stop retrying.
	hardStop   context.Context
	hardStopFn context.CancelFunc
	pullers    sync.WaitGroup
	runs       sync.WaitGroup
	// live ends when Stop begins; resends are the stored reports being
	// sent directly again meanwhile (resendStored).
	live    context.Context
	resends sync.WaitGroup
	// revocations follows the executions the orchestrators revoked
	// (revoked.go).
	revocations revocations

	runningMu sync.Mutex
	running   map[string]*execution // by task id

	// stopped is closed when Stop has returned for this session.
	stopped chan struct{}
}

// New returns an executor that talks to NATS through nc. It checks cfg
// (see Config for the defaults of its zero fields) but does not talk to
// NATS until Start.
func New(nc *nats.Conn, cfg Config) (*Executor, error) {
	if nc == nil {
		return nil, errors.New("executor: nil NATS connection")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("executor: jetstream: %w", err)
	}
	log := cfg.Logger.With("executor", cfg.ID)
	e := &Executor{
		cfg: cfg, nc: nc, js: js,
		log:       log,
		metrics:   cfg.Metrics,
		handlers:  make(map[string]Handler),
		load:      newLoad(cfg.Capacity),
		reporting: make(chan struct{}, reportSlots(cfg.Capacity)),
		reports: direct.NewBatcher(direct.New(nc, func(subj string, err error) {
			log.Warn("a direct report got no answer in time (an orchestrator lost or slow, or "+subj+" not allowed to this executor); storing reports meanwhile",
				"error", err, "pause", direct.Pause)
		})),
	}
	e.registry = newRegistry(e)
	return e, nil
}

// ID returns the executor's id as recorded in task records.
func (e *Executor) ID() string { return e.cfg.ID }

// Handle registers the handler for a task type, replacing any earlier one.
// Handlers may be registered while the executor runs.
func (e *Executor) Handle(taskType string, h Handler) {
	e.handlersMu.Lock()
	defer e.handlersMu.Unlock()
	e.handlers[taskType] = h
}

// HandleFunc registers a function as the handler for a task type.
func (e *Executor) HandleFunc(taskType string, f func(ctx context.Context, job *Job) (any, error)) {
	e.Handle(taskType, HandlerFunc(f))
}

func (e *Executor) handler(taskType string) Handler {
	e.handlersMu.RLock()
	defer e.handlersMu.RUnlock()
	return e.handlers[taskType]
}

// Start creates the ready consumers of its capabilities and starts pulling;
// it returns once the executor runs. If AX's streams do not exist yet (no
// orchestrator has created them) it waits for them until ctx ends. ctx
// bounds only the start: cancelling it later does not stop the executor.
//
// Start on a running executor does nothing; Start after Stop starts it
// again (handlers a Stop gave up on may still be finishing: they keep their
// capacity until they do). A Stop while Start waits for AX's streams ends
// the wait: Start returns an error wrapping ErrStopped.
func (e *Executor) Start(ctx context.Context) error {
	e.startMu.Lock()
	defer e.startMu.Unlock()
	e.mu.Lock()
	if e.sess != nil {
		e.mu.Unlock()
		return nil
	}
	startCtx, cancelStart := context.WithCancel(ctx)
	e.cancelStart = cancelStart
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.cancelStart = nil
		e.mu.Unlock()
		cancelStart()
	}()
	stopped := func() bool { return startCtx.Err() != nil && ctx.Err() == nil }

	// The orchestrator creates AX's streams; an executor started first, or
	// during a JetStream outage, waits for them.
	s := &session{running: make(map[string]*execution), stopped: make(chan struct{})}
	var pullers []*puller
	// Tries at most 2 s apart: under faults an executor restarted waited
	// 5 s between them while its tasks waited for any executor.
	err := topology.RetryUpTo(startCtx, 2*time.Second, func(ctx context.Context) error {
		var err error
		pullers, err = e.bind(ctx, s)
		return err
	}, func(err error, wait time.Duration) {
		e.log.Warn("cannot bind to AX's streams yet; waiting", "error", err, "retry_in", wait)
	})
	if err != nil && stopped() {
		return fmt.Errorf("executor: start: %w", ErrStopped)
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	err = topology.Retry(startCtx, func(ctx context.Context) error { return e.watchRevocations(ctx, s) },
		func(err error, wait time.Duration) {
			e.log.Warn("cannot watch the revoked executions yet; waiting", "error", err, "retry_in", wait)
		})
	if err != nil && stopped() {
		return fmt.Errorf("executor: start: %w", ErrStopped)
	}
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if stopped() {
		e.stopRevocations(s)
		return fmt.Errorf("executor: start: %w", ErrStopped)
	}
	s.hardStop, s.hardStopFn = context.WithCancel(context.WithoutCancel(ctx))
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopPulling, s.live = cancel, runCtx
	for _, p := range pullers {
		s.pullers.Add(1)
		go func() {
			defer s.pullers.Done()
			p.run(runCtx)
		}()
	}
	e.sess = s
	e.registry.start() // announce it (registry.go)
	e.log.Info("executor started", "capabilities", e.cfg.Capabilities, "capacity", e.cfg.Capacity)
	return nil
}

// bind binds the streams the executor uses (once) and creates the ready
// consumers of a session's pullers.
func (e *Executor) bind(ctx context.Context, s *session) ([]*puller, error) {
	if !e.checked {
		// A stream that does not answer for now (no leader) is no reason
		// to wait: the binds below fail on what is really missing.
		switch err := topology.Check(ctx, e.js); {
		case err == nil:
			e.checked = true
		case errors.Is(err, topology.ErrMissing) || !consume.Unavailable(err):
			return nil, err
		}
	}
	if e.fanin == nil {
		fi, err := fanin.New(ctx, e.js)
		if err != nil {
			return nil, err
		}
		e.fanin, e.objects = fi, object.New(e.js)
	}
	var pullers []*puller
	for _, capability := range e.cfg.Capabilities {
		p, err := e.newPuller(ctx, s, capability)
		if err != nil {
			return nil, err
		}
		pullers = append(pullers, p)
	}
	return pullers, nil
}

// Stop stops pulling, then waits for running handlers to finish and report.
// If ctx ends first, Stop cancels the remaining handlers' contexts, hands
// their tasks back at once for another executor (or this one after a
// restart) to run again, and returns an error wrapping ctx's error without
// waiting for them: a handler that ignores its context cannot hold Stop.
// Such a handler's outcome is discarded when it returns.
//
// Order: stop fetching → drain in-flight handlers → remove its workers
// registry announcement → flush reports → return.
// The caller closes the NATS connection afterwards. Stop on an executor
// that is not running returns nil; a Stop while another is under way waits
// for it (bounded by its own ctx).
func (e *Executor) Stop(ctx context.Context) error {
	e.mu.Lock()
	if e.cancelStart != nil {
		e.cancelStart() // a Start waiting for AX's streams gives up
	}
	s := e.sess
	if s == nil {
		s = e.stopping
		e.mu.Unlock()
		if s == nil {
			return nil
		}
		select {
		case <-s.stopped:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("executor: stop: %w", ctx.Err())
		}
	}
	e.sess, e.stopping = nil, s
	e.mu.Unlock()
	defer func() {
		close(s.stopped)
		e.mu.Lock()
		if e.stopping == s {
			e.stopping = nil
		}
		e.mu.Unlock()
	}()

	s.stopPulling()
	done := make(chan struct{})
	go func() {
		s.pullers.Wait()
		s.runs.Wait()
		s.resends.Wait() // they end with live
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.hardStopFn()
		e.abandonRunning(s)
		err = fmt.Errorf("executor: stop: %w", ctx.Err())
	}
	e.stopRevocations(s)
	s.hardStopFn()
	e.reports.Close() // the batches of reports in flight (none once the runs ended)
	rctx, cancelR := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout(ctx))
	e.registry.stop(rctx) // no longer announced (registry.go)
	cancelR()
	// Acks are asynchronous: send them before the caller closes.
	if err := e.nc.FlushTimeout(flushTimeout(ctx)); err != nil && !e.nc.IsClosed() {
		e.log.Debug("flush on stop failed", "error", err)
	}
	if err != nil {
		e.log.Warn("executor stopped before its handlers finished; their tasks were handed back", "error", err)
	} else {
		e.log.Info("executor stopped")
	}
	return err
}

// flushTimeout bounds the final flush of Stop: what is left of ctx, at
// least 100ms (a stop that timed out still sends its hand-backs), at most 5s.
func flushTimeout(ctx context.Context) time.Duration {
	d := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 100*time.Millisecond)
}

// reportSlots bounds the attempts whose handler returned and whose outcome
// is still being reported: four per unit of capacity, at least 64. When
// reports cannot be stored (JetStream unavailable), the executor stops
// taking work once they are all held.
func reportSlots(capacity float64) int {
	return max(64, int(math.Ceil(4*capacity)))
}

// load tracks the summed estimated cost of running tasks against capacity.
type load struct {
	mu       sync.Mutex
	capacity float64
	inFlight float64
	// reserve is the cost of a task turned away for lack of room: pulling
	// pauses until it would fit, so big tasks are not starved by small ones.
	reserve float64
	changed chan struct{}
}

func newLoad(capacity float64) *load {
	return &load{capacity: capacity, changed: make(chan struct{})}
}

// free blocks until there is room to pull and returns how many unit-cost
// tasks would fit (at least 1).
func (l *load) free(ctx context.Context) (int, bool) {
	for {
		l.mu.Lock()
		room := l.capacity - l.inFlight
		if room > 0 && (l.inFlight == 0 || l.reserve <= room) {
			l.mu.Unlock()
			return max(int(math.Ceil(room)), 1), true
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// admit takes cost into the in-flight load if it fits (anything fits an
// idle executor) and reports whether it did.
func (l *load) admit(cost float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight > 0 && l.inFlight+cost > l.capacity+1e-9 {
		l.reserve = max(l.reserve, cost)
		return false
	}
	if cost >= l.reserve {
		l.reserve = 0
	}
	l.inFlight += cost
	return true
}

// release returns cost when a task ends.
func (l *load) release(cost float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight -= cost
	if l.inFlight < 1e-9 {
		l.inFlight = 0
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// InFlight returns the summed estimated cost of the tasks running now.
func (e *Executor) InFlight() float64 {
	e.load.mu.Lock()
	defer e.load.mu.Unlock()
	return e.load.inFlight
}
