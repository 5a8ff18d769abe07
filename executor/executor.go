package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
)

// Executor pulls ready tasks of its capabilities and runs their handlers.
// Register handlers with Handle before Start.
type Executor struct {
	cfg   Config
	nc    *nats.Conn
	js    jetstream.JetStream
	log   zerolog.Logger
	store *store.Store
	// fanin reads shards' outcomes for aggregators; objects holds plans
	// and large results.
	fanin   *fanin.Markers
	objects jetstream.ObjectStore
	// leases is AX_LEASES: the leases of tasks running long enough to
	// heart-beat, which keep a copy of their dispatch from taking over.
	leases jetstream.Stream

	handlersMu sync.RWMutex
	handlers   map[string]Handler

	load    *load
	metrics *metrics.Executor

	runningMu sync.Mutex
	running   map[string]*execution // by task id

	// hardStop ends when Stop gives up waiting: reports stop retrying.
	hardStop   context.Context
	hardStopFn context.CancelFunc

	mu        sync.Mutex
	stopFn    context.CancelFunc
	pullers   sync.WaitGroup
	runs      sync.WaitGroup
	cancelSub *nats.Subscription
	// signals owns the checks of cancel signals (cancelRunning); none
	// starts once signalsDone is set.
	signals     sync.WaitGroup
	signalsMu   sync.Mutex
	signalsDone bool
}

// New returns an executor that talks to NATS through nc.
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
	hardStop, hardStopFn := context.WithCancel(context.Background())
	return &Executor{
		cfg: cfg, nc: nc, js: js, hardStop: hardStop, hardStopFn: hardStopFn,
		log:      cfg.Logger.With().Str("executor", cfg.ID).Logger(),
		handlers: make(map[string]Handler),
		load:     newLoad(cfg.Capacity),
		metrics:  metrics.NewExecutor(cfg.Metrics),
		running:  make(map[string]*execution),
	}, nil
}

// ID returns the executor's id as recorded in task records.
func (e *Executor) ID() string { return e.cfg.ID }

// Handle registers the handler for a task type, replacing any earlier one.
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

// Start creates the ready consumers of its capabilities and starts pulling.
func (e *Executor) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopFn != nil {
		return nil
	}
	// The orchestrator creates AX's streams; an executor started first, or
	// during a JetStream outage, waits for them.
	var pullers []*puller
	err := topology.Retry(ctx, func(ctx context.Context) error {
		var err error
		pullers, err = e.bind(ctx)
		return err
	}, func(err error, wait time.Duration) {
		e.log.Warn().Err(err).Dur("retry_in", wait).Msg("cannot bind to AX's streams yet; waiting")
	})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	sub, err := e.nc.Subscribe(subject.CancelSignalAll, func(m *nats.Msg) {
		e.signalsMu.Lock()
		defer e.signalsMu.Unlock()
		if e.signalsDone {
			return
		}
		e.signals.Add(1)
		go func() {
			defer e.signals.Done()
			e.cancelRunning(subject.TaskIDFromCancelSignal(m.Subject))
		}()
	})
	if err != nil {
		return fmt.Errorf("executor: subscribe to cancel signals: %w", err)
	}
	e.cancelSub = sub
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopFn = cancel
	for _, p := range pullers {
		e.pullers.Add(1)
		go func() {
			defer e.pullers.Done()
			p.run(runCtx)
		}()
	}
	e.log.Info().Strs("capabilities", e.cfg.Capabilities).Float64("capacity", e.cfg.Capacity).Msg("executor started")
	return nil
}

// bind binds the streams the executor uses and its ready consumers.
func (e *Executor) bind(ctx context.Context) ([]*puller, error) {
	if err := topology.Check(ctx, e.js); err != nil {
		return nil, err
	}
	st, err := store.New(ctx, e.js)
	if err != nil {
		return nil, err
	}
	e.store = st
	if e.fanin, err = fanin.New(ctx, e.js); err != nil {
		return nil, err
	}
	if e.objects, err = e.js.ObjectStore(ctx, subject.BucketObjects); err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.BucketObjects, err)
	}
	if e.leases, err = e.js.Stream(ctx, subject.StreamLeases); err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.StreamLeases, err)
	}
	var pullers []*puller
	for _, capability := range e.cfg.Capabilities {
		p, err := e.newPuller(ctx, capability)
		if err != nil {
			return nil, err
		}
		pullers = append(pullers, p)
	}
	return pullers, nil
}

// Stop stops pulling, then waits for running handlers to finish and report.
// If ctx ends first, the remaining handlers are cancelled and their tasks
// handed back for another executor, and Stop returns ctx's error.
//
// Order: stop fetching → drain in-flight handlers → flush reports → return.
// The caller closes the NATS connection afterwards.
func (e *Executor) Stop(ctx context.Context) error {
	e.mu.Lock()
	cancel := e.stopFn
	e.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	e.pullers.Wait()
	done := make(chan struct{})
	go func() { e.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		e.hardStopFn()
		e.abandonRunning()
		<-done
		err = fmt.Errorf("executor: stop: %w", ctx.Err())
	}
	if e.cancelSub != nil {
		_ = e.cancelSub.Unsubscribe()
		e.signalsMu.Lock()
		e.signalsDone = true
		e.signalsMu.Unlock()
		e.signals.Wait()
	}
	e.hardStopFn()
	// Acks are asynchronous: send them before the caller closes.
	_ = e.nc.FlushTimeout(5 * time.Second)
	e.log.Info().Msg("executor stopped")
	return err
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
