package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/internal/admission"
	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/edges"
	"github.com/ax-run/ax/internal/exectoken"
	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/tracing"
	"github.com/ax-run/ax/internal/typeset"
	"github.com/ax-run/ax/internal/unique"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/task"
)

func randFloat() float64 { return rand.Float64() }

// Orchestrator runs the orchestrator's consumers. Create it with New, then
// Start and Stop it; both are idempotent.
type Orchestrator struct {
	cfg   config
	nc    *nats.Conn
	js    jetstream.JetStream
	log   *slog.Logger
	store *store.Store
	// committer batches the store's writes when AX_TASKS turns group
	// commit on (TopologyOptions.GroupCommit; nil otherwise); it is closed
	// after the last handler and sweep returned.
	committer *groupcommit.Committer
	// fanin counts how shards and wide fan-in upstreams ended.
	fanin *fanin.Markers
	// edges holds the dependency edges (who depends on whom).
	edges *edges.Edges
	// unique holds the tasks' unique keys.
	unique *unique.Keys
	// types holds the accepted task types under Limits.MaxTaskTypes (nil:
	// unlimited).
	types *typeset.Set
	// objects reads shard plans from the object stores; buckets remembers
	// the capabilities whose object store exists (objects.go).
	objects *object.Stores
	buckets *objectBuckets
	// tokens signs dispatches and checks the execution tokens of reports,
	// claims and leases (internal/exectoken).
	tokens *exectoken.Key
	// timers is the AX_TIMERS stream, for cancelling pending timers.
	timers leaderget.Streamer
	// tasks and leases are AX_TASKS and AX_LEASES, which the reconciler
	// reads (with the ready consumers on AX_TASKS) to tell a lost task from
	// a queued or running one.
	tasks  jetstream.Stream
	leases leaderget.Streamer
	// held is AX_HELD: the markers of tasks waiting for a slot.
	held leaderget.Streamer
	// events is AX_EVENTS: the events event tasks wait for.
	events leaderget.Streamer
	// timers, leases, held and events are bound at their first use that
	// needs it (leaderget.Lazy): a restart does not wait for their leaders.
	// reads sends the leader reads of the streams above (leaderget): one
	// inbox for all of them.
	reads *leaderget.Reader
	// ensurer and setupSteps are setup's progress across Start's tries.
	ensurer    *topology.Ensurer
	setupSteps topology.Steps
	// bells rings the doorbells of the levels dispatched on (bell.go).
	bells *bells
	// sweeps batches the reconciler's looks at dispatched tasks;
	// sweepMemo spares them the tasks whose end was written here.
	sweeps    *sweepBatcher
	sweepMemo *sweepMemo
	// levels remembers ready levels recently found holding dispatches.
	levels busyLevels
	// oldest feeds ax_reconciler_oldest_unfinished_seconds.
	oldest oldestSeen
	// dispatched remembers recent dispatches so a report can be applied
	// without reading the task back (see handleReport).
	dispatchCache *dispatchCache
	// retrySlots is the shared retry budget counter.
	retrySlots window.Counter
	// control is the AX_CONTROL bucket behind gate.
	control jetstream.KeyValue
	gate    *gate
	// limits are the key limits in force; slotsKV holds the concurrency
	// slots taken (keylimits.go); fair queues the ready tasks of fairness
	// keys while their level is busy (fair.go).
	limits  *keyLimits
	slotsKV jetstream.KeyValue
	// revoked is AX_REVOKED: the executions of cancelled and expired
	// tasks, which executors watch (effects.go, revoke).
	revoked jetstream.KeyValue
	fair    *fairQueue
	// gone remembers the orchestrator instances found gone (orphans.go).
	gone goneOwners
	// batchItems bounds the messages of batch direct requests applied at
	// once (direct.go).
	batchItems chan struct{}
	// admission decides when a ready task is dispatched: its key's
	// limits, then its fairness key's turn.
	admission admission.Chain
	// instance names this run of the orchestrator in the sweep entries of the
	// tasks it queues for fairness.
	instance string
	// slotBatches combines this orchestrator's changes to one key's
	// slots (keylimits.go).
	slotBatches slotBatches
	slotWakes   slotWakes
	slotPickers slotPickers
	// slotKeys are the concurrency keys whose slots are exported.
	slotKeysMu sync.Mutex
	slotKeys   map[string]struct{}
	metrics    Metrics
	obs        *observer
	tracer     trace.Tracer
	// runCtx ends at Stop; bg owns background work (watch, breakers, releases).
	runCtx context.Context
	bg     sync.WaitGroup

	mu     sync.Mutex
	stopFn context.CancelFunc
	done   chan struct{}
}

// New returns an orchestrator that talks to NATS through nc. It does not
// connect to anything until Start.
func New(nc *nats.Conn, cfg Config) (*Orchestrator, error) {
	if nc == nil {
		return nil, errors.New("orchestrator: nil NATS connection")
	}
	if err := cfg.Limits.validate(); err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	for _, l := range cfg.KeyLimits {
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("orchestrator: key limit %q: %w", l.Key, err)
		}
	}
	c := cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: jetstream: %w", err)
	}
	o := &Orchestrator{cfg: c, nc: nc, js: js, bells: newBells(nc), batchItems: make(chan struct{}, directBatchItems), dispatchCache: newDispatchCache(c.DispatchCacheBytes), sweepMemo: newSweepMemo(c.ReconcileInterval), buckets: newObjectBuckets(), gate: newGate(c.Breaker), obs: newObserver(c.Metrics),
		log: c.Logger.With(slog.String("node", c.NodeID)), limits: newKeyLimits(c.KeyLimits), instance: nuid.Next()}
	o.gate.limits = o.limits
	o.admission = admission.Chain{keyAdmitter{o}}
	if c.FairWindow > 0 {
		o.fair = newFairQueue(o, c.FairWindow)
		o.admission = append(o.admission, fairAdmitter{o.fair})
	}
	o.metrics = o.obs.m
	o.tracer = tracing.Tracer(c.TracerProvider)
	return o, nil
}

// Start creates the topology and consumers and starts consuming. It returns
// once everything is set up; the work goes on until Stop.
func (o *Orchestrator) Start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopFn != nil {
		return nil
	}
	loops := o.loops()
	// JetStream may be briefly unavailable (a node down, a partition, a
	// leader election): wait it out instead of exiting.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.runCtx = runCtx
	// Each try resumes at the step that failed, within a second of it
	// (setup): the orchestrator serves nothing until it is through.
	err := topology.RetryUpTo(ctx, time.Second, func(ctx context.Context) error {
		if err := o.setup(ctx, loops); err != nil {
			return err
		}
		return o.watchControl(runCtx)
	}, func(err error, wait time.Duration) {
		o.log.Warn("cannot set up AX's streams and consumers yet; retrying", slog.Any("error", err), slog.Duration("retry_in", wait))
	})
	if err != nil {
		cancel()
		o.bg.Wait()
		o.closeCommitter()
		return fmt.Errorf("orchestrator: %w", err)
	}
	if err := o.serveClaims(runCtx); err != nil {
		cancel()
		o.bg.Wait()
		o.closeCommitter()
		return fmt.Errorf("orchestrator: %w", err)
	}
	if err := o.serveInputs(runCtx); err != nil {
		cancel()
		o.bg.Wait()
		o.closeCommitter()
		return fmt.Errorf("orchestrator: %w", err)
	}
	if err := o.serveStates(runCtx); err != nil {
		cancel()
		o.bg.Wait()
		o.closeCommitter()
		return fmt.Errorf("orchestrator: %w", err)
	}
	o.bg.Add(1)
	go o.breakerLoop(runCtx)
	o.bg.Add(1)
	go o.trimLoop(runCtx)
	o.bg.Add(1)
	go o.slotAuditLoop(runCtx)
	if o.fair != nil {
		if err := o.fair.serveOwner(runCtx); err != nil {
			cancel()
			o.bg.Wait()
			o.closeCommitter()
			return fmt.Errorf("orchestrator: %w", err)
		}
		o.bg.Add(1)
		go o.fair.run(runCtx)
	}
	// The sweep batcher outlives the consume loops: handlers finishing the
	// messages in hand at Stop still dispatch.
	sweepCtx, stopSweeps := context.WithCancel(context.Background())
	o.sweeps = newSweepBatcher(o)
	o.bg.Add(1)
	go o.sweeps.run(sweepCtx)
	// Taking over the fairness queues of orchestrators that are gone
	// looks at tasks with the sweep batcher.
	o.bg.Add(1)
	go o.orphanLoop(runCtx)
	// Direct requests apply outcomes, whose effects use the sweep batcher.
	if err := o.serveDirect(runCtx); err != nil {
		cancel()
		stopSweeps()
		o.bg.Wait()
		o.closeCommitter()
		return fmt.Errorf("orchestrator: %w", err)
	}
	if o.obs.on {
		o.bg.Add(1)
		go o.sampleLoop(runCtx)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range loops {
		bind := func(ctx context.Context) (jetstream.Consumer, error) { return o.bindLoop(ctx, l) }
		keep := consume.KeepPoison(o.js, l.consumer)
		loop := consume.Loop{Name: l.consumer, Workers: o.cfg.Workers, Batch: o.cfg.Batch, MaxBytes: o.pullBufferBytes(),
			Handle: o.obs.countRedeliveries(l.consumer, l.handle), Log: o.log, AckWait: o.cfg.AckWait, MaxDeliveries: o.cfg.MaxDeliveries,
			Poison: func(ctx context.Context, msg jetstream.Msg, reason error) error {
				if err := keep(ctx, msg, reason); err != nil {
					return err
				}
				o.metrics.MessagePoisoned(l.consumer)
				return nil
			}}
		started := false
		wg.Add(1)
		go func() {
			defer wg.Done()
			consume.Supervise(runCtx, loop, bind, func(running bool) {
				if running {
					o.metrics.ConsumerStarted(l.consumer, started)
					started = true
				} else {
					o.metrics.ConsumerStopped(l.consumer)
				}
			})
		}()
	}
	// Shutdown order: stop pulling → finish messages in hand → stop the
	// background work (control watch, breaker ticks, releases).
	go func() {
		wg.Wait()
		stopSweeps()
		o.bg.Wait()
		o.closeCommitter()
		close(done)
	}()
	o.stopFn, o.done = cancel, done
	o.log.Info("orchestrator started")
	return nil
}

// errLegacyHistories: AX_TASKS holds task histories in the layout of an
// earlier version. It is not retried: the operator migrates them.
var errLegacyHistories = fmt.Errorf("%w: AX_TASKS holds task histories written by an earlier version of AX (one subject per task: ax.task.<id>); stop every orchestrator and executor of that version, then run `ax migrate tasks` (deploy/README.md, Upgrading)", topology.ErrPermanent)

// closeCommitter closes the group committer, if any, once nothing writes.
func (o *Orchestrator) closeCommitter() {
	if o.committer != nil {
		o.committer.Close()
	}
}

// pullBufferBytes bounds what each consume loop buffers ahead of its
// handlers: by bytes, so the memory of a backlog of large submissions is
// bounded by configuration (with Workers), not by the backlog. Well above
// the largest message AX stores (AX_SUBMIT's 2 MiB; a dispatch or an event
// carries a payload of at most MaxPayload once).
func (o *Orchestrator) pullBufferBytes() int {
	return max(8<<20, 4*o.cfg.MaxPayload)
}

// loop is one of the orchestrator's consumers and its handler.
type loop struct {
	stream, consumer string
	filters          []string // none: the whole stream
	handle           consume.Handler
}

func (o *Orchestrator) loops() []loop {
	ls := []loop{
		// Unlaned submissions and graphs, in arrival order.
		{subject.StreamSubmit, subject.ConsumerSubmit, []string{subject.SubmitAll, subject.GraphSubmit}, o.tracedSubmit},
		{subject.StreamCompleted, subject.ConsumerCompleted, nil, o.handleReport},
		// A task's timers, and apart from them the reconciler's looks.
		{subject.StreamTimers, subject.ConsumerTimers, subject.FireFilters(false), o.handleFire},
		{subject.StreamTimers, subject.ConsumerLooks, subject.FireFilters(true), o.handleFire},
		{subject.StreamCommands, subject.ConsumerCommands, nil, o.handleCommand},
		{subject.StreamEvents, subject.ConsumerEvents, nil, o.handleEvent},
	}
	// One intake lane per priority: a p0 submission is not queued behind
	// a burst of p5 ones.
	for p := range subject.Priorities {
		ls = append(ls, loop{subject.StreamSubmit, subject.ConsumerSubmitLane(p), []string{subject.SubmitLaneAll(p)}, o.tracedSubmit})
	}
	return ls
}

// bindLoop creates or updates a loop's durable consumer.
func (o *Orchestrator) bindLoop(ctx context.Context, l loop) (jetstream.Consumer, error) {
	var filter string
	var filters []string
	switch len(l.filters) {
	case 0:
	case 1:
		filter = l.filters[0]
	default:
		filters = l.filters
	}
	cons, err := o.js.CreateOrUpdateConsumer(ctx, l.stream, jetstream.ConsumerConfig{
		Durable:        l.consumer,
		FilterSubject:  filter,
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.cfg.AckWait,
		MaxAckPending:  4 * o.cfg.Batch * o.cfg.Workers / 16,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// The handler keeps a message as poison at MaxDeliveries (many
		// more when it failed for want of an answer); this is the
		// server's backstop should even that keep failing.
		MaxDeliver: 2 * consume.UnavailableDeliveries * int(o.cfg.MaxDeliveries),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", l.consumer, err)
	}
	return cons, nil
}

// setup creates AX's topology and binds what the orchestrator uses,
// including its consumers (so they exist when Start returns). Start calls
// it again after an error (JetStream briefly unavailable): it resumes at
// the steps that failed, and never redoes one done (under faults, some of
// its ~100 requests time out; started over each time, an orchestrator
// restarted during a chaos run took 67 s to get through them all at once).
// The steps of a wave run at once: each binds another stream, whose leader
// may be the one missing; one after another, an orchestrator restarted in
// a chaos run waited out each such stream in turn.
func (o *Orchestrator) setup(ctx context.Context, loops []loop) error {
	if o.ensurer == nil {
		o.ensurer = topology.NewEnsurer(o.js, o.cfg.Topology)
		o.reads = leaderget.New(o.js)
		o.objects = object.New(o.js)
		o.timers = leaderget.NewLazy(o.js, subject.StreamTimers, o.reads)
		o.leases = leaderget.NewLazy(o.js, subject.StreamLeases, o.reads)
		o.held = leaderget.NewLazy(o.js, subject.StreamHeld, o.reads)
		o.events = leaderget.NewLazy(o.js, subject.StreamEvents, o.reads)
		o.fanin, o.edges, o.unique = fanin.Open(o.js), edges.Open(o.js), unique.Open(o.js)
	}
	bindKV := func(bucket string, kv *jetstream.KeyValue) func() error {
		return func() error {
			b, err := leaderget.BindKV(ctx, o.js, bucket, o.reads)
			if err != nil {
				return fmt.Errorf("bind %s: %w", bucket, err)
			}
			*kv = b
			return nil
		}
	}
	waves := [][]topology.Step{
		{{Name: "topology", Run: func() error { return o.ensureTopology(ctx) }}},
		{
			{Name: "store", Run: func() error { return o.bindStore(ctx) }},
			{Name: "types", Run: func() (err error) {
				if n := o.cfg.Limits.MaxTaskTypes; n > 0 && o.types == nil {
					o.types, err = typeset.New(ctx, o.js, n, o.cfg.NodeID, o.cfg.Now)
				}
				return err
			}},
			{Name: "tokens", Run: func() (err error) { o.tokens, err = exectoken.Load(ctx, o.js); return err }},
			{Name: "retry slots", Run: func() error { return o.bindRetrySlots(ctx) }},
			{Name: "control", Run: bindKV(subject.BucketControl, &o.control)},
			{Name: "slots", Run: bindKV(subject.BucketSlots, &o.slotsKV)},
			{Name: "revoked", Run: func() (err error) {
				if o.revoked, err = o.js.KeyValue(ctx, subject.BucketRevoked); err != nil {
					return fmt.Errorf("bind %s: %w", subject.BucketRevoked, err)
				}
				return nil
			}},
		},
		{
			{Name: "tasks", Run: func() error { return o.bindTasks(ctx) }}, // after store
			{Name: "configured limits", Run: func() error { // after control
				// Clients list the configured limits beside those set at run time.
				data, _ := json.Marshal(task.ConfiguredLimits{Limits: o.cfg.KeyLimits, By: o.cfg.NodeID, At: o.now()})
				if _, err := o.control.Put(ctx, subject.ControlConfiguredLimits, data); err != nil {
					return fmt.Errorf("publish the configured key limits: %w", err)
				}
				return nil
			}},
		},
		{{Name: "consumers", Run: func() error { o.bindLoops(ctx, loops); return nil }}},
	}
	for _, wave := range waves {
		if err := o.setupSteps.Run(wave, len(wave)); err != nil {
			return err
		}
	}
	return nil
}

// topologyQuick bounds the wait for the topology's update at a start when
// all of it exists already (ensureTopology).
const topologyQuick = 5 * time.Second

// ensureTopology creates AX's streams, buckets and object stores, or
// brings them to this orchestrator's configuration, before it serves. When
// all of them exist (one list of stream names, from the meta leader) and
// their update takes longer than topologyQuick (under faults: a stream
// without a leader answers nothing, and a restarted orchestrator waited a
// minute for the dead-letter stream's while it served nothing), the
// orchestrator serves at once and finishes the update in the background
// (ensureTopologyLater). A refusal (ErrFewerReplicas) within the quick try
// still stops the start. Anything missing is created first, however long
// that takes.
func (o *Orchestrator) ensureTopology(ctx context.Context) error {
	if missing, err := o.ensurer.Missing(ctx); err != nil || len(missing) > 0 {
		return o.ensurer.Ensure(ctx)
	}
	quick, cancel := context.WithTimeout(ctx, topologyQuick)
	err := o.ensurer.Ensure(quick)
	cancel()
	if err == nil || errors.Is(err, topology.ErrFewerReplicas) || errors.Is(err, topology.ErrPermanent) || ctx.Err() != nil {
		return err
	}
	o.log.Warn("serving before AX's topology is up to date: the rest is ensured in the background", slog.Any("error", err))
	o.bg.Add(1)
	go o.ensureTopologyLater(o.runCtx)
	return nil
}

// ensureTopologyLater finishes the topology's update that ensureTopology
// left to the background, trying again until it is done or the
// orchestrator stops. A refusal is logged as an error and ends the tries:
// the streams keep their configuration.
func (o *Orchestrator) ensureTopologyLater(ctx context.Context) {
	defer o.bg.Done()
	err := topology.RetryUpTo(ctx, 5*time.Second, o.ensurer.Ensure, func(err error, wait time.Duration) {
		o.log.Warn("cannot bring AX's topology up to date yet; retrying", slog.Any("error", err), slog.Duration("retry_in", wait))
	})
	switch {
	case err == nil:
		o.log.Info("AX's topology is up to date")
	case ctx.Err() == nil:
		o.log.Error("AX's topology was left as it is", slog.Any("error", err))
	}
}

// bindLoops creates or updates the loops' consumers, all at once, so that
// they exist when Start returns. One that cannot be created now (its
// stream without a leader, a consumer without quorum) does not hold up
// the start: its loop creates it again until it can (consume.Supervise),
// while the others' work, and the direct requests, go on. Under faults an
// orchestrator restarted waited for each in turn: a chaos run's two
// orchestrators, killed in the same outage, served nothing for 57 and 21
// s, the last 10–16 s of it for one submission lane's consumer.
func (o *Orchestrator) bindLoops(ctx context.Context, loops []loop) {
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := o.bindLoop(ctx, l); err != nil {
				o.log.Warn("cannot create a consumer yet; starting without it, its loop creates it", slog.String("consumer", l.consumer), slog.Any("error", err))
			}
		}()
	}
	wg.Wait()
}

// bindStore binds the task store, with group commit when this
// orchestrator's configuration asks for it, or, when it does not say,
// when AX_TASKS does (the topology's update, which records the
// configuration's choice there, may still be going on: ensureTopology).
func (o *Orchestrator) bindStore(ctx context.Context) error {
	st, err := store.New(ctx, o.js)
	if err != nil {
		return err
	}
	on := st.GroupCommit()
	if g := o.cfg.Topology.GroupCommit; g != nil {
		on = *g
	}
	if on {
		if o.cfg.defaultWorkers {
			o.cfg.Workers = DefaultGroupCommitWorkers
		}
		if o.committer == nil {
			o.committer = groupcommit.New(o.js, groupcommit.Options{Committed: o.metrics.RecordsCommitted,
				Refused: func(n int, err error) {
					o.log.Warn("a batch of record writes was not committed; writing them one by one", slog.Int("writes", n), slog.Any("error", err))
				}})
			o.log.Info("group commit on: record writes that queue up go as atomic batches", slog.Int("workers", o.cfg.Workers))
		}
		st.UseCommitter(o.committer)
	}
	o.store = st
	return nil
}

// bindTasks binds AX_TASKS, refusing one that holds task histories of an
// earlier version's layout (and recording, with none, that there are none).
func (o *Orchestrator) bindTasks(ctx context.Context) error {
	tasks, err := o.bind(ctx, subject.StreamTasks)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.StreamTasks, err)
	}
	if tasks.CachedInfo().Config.Metadata[topology.TaskLayoutKey] != topology.TaskLayout {
		if legacy, err := o.store.HasLegacy(ctx); err != nil {
			return err
		} else if legacy {
			return errLegacyHistories
		}
		if err := topology.SetTaskLayout(ctx, o.js); err != nil {
			return err
		}
	}
	o.tasks = tasks
	return nil
}

// Stop stops pulling, finishes the messages in hand and returns when done or
// when ctx ends. Messages not finished are redelivered to another
// orchestrator (or this one after a restart).
func (o *Orchestrator) Stop(ctx context.Context) error {
	o.mu.Lock()
	cancel, done := o.stopFn, o.done
	o.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		// Acks are asynchronous: send them before the caller closes.
		_ = o.nc.FlushTimeout(5 * time.Second)
		o.log.Info("orchestrator stopped")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("orchestrator: stop: %w", ctx.Err())
	}
}

func (o *Orchestrator) now() time.Time { return o.cfg.Now().UTC() }

// StoreReads returns how many task records the orchestrator has read since
// it started (0 before Start): the cost benchmarks and tests watch, e.g.
// that completing a shard does not read its siblings.
func (o *Orchestrator) StoreReads() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.store == nil {
		return 0
	}
	return o.store.Reads()
}

// bind binds the stream name with its leader reads through o.reads.
func (o *Orchestrator) bind(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := o.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return leaderget.Wrap(st, o.reads), nil
}
