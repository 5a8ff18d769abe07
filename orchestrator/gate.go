package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/breaker"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// A gate decides whether tasks of a type may be dispatched: not while all
// types or the type are paused (for retries only, or for everything), and
// not while the type's circuit breaker is open (half-open lets a few
// probes through). Its state lives in the AX_CONTROL bucket; every
// orchestrator keeps a copy current by watching it.
//
// A task that would become ready while its gate is closed is held: it stays
// waiting (or retrying) with a reason saying why, and a marker on
// ax.held.<type>.<id> remembers it. Whoever opens the gate — a resume
// command, a breaker moving to half-open or closed — releases the markers,
// and each task goes through the usual compare-and-set path again.
type gate struct {
	cfg breaker.Config
	// limits receives the key limits set at run time (limit.<id> keys).
	limits *keyLimits

	mu       sync.Mutex
	pauses   map[string]task.Pause // by type; "" is every type
	breakers map[string]*breaker.Breaker
	// shared is each breaker's state as last read from or written to the
	// bucket; a local state ahead of it is a change to share.
	shared map[string]breaker.State
	// sharedSince is when each shared state began (a half-open breaker
	// whose probes timed out starts a fresh half-open).
	sharedSince map[string]time.Time
	revs        map[string]uint64 // control key → last revision seen
}

func newGate(cfg breaker.Config) *gate {
	return &gate{cfg: cfg.WithDefaults(), pauses: map[string]task.Pause{},
		breakers: map[string]*breaker.Breaker{}, shared: map[string]breaker.State{}, sharedSince: map[string]time.Time{}, revs: map[string]uint64{}}
}

func (g *gate) breaker(taskType string) *breaker.Breaker {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.breakers[taskType]
	if b == nil {
		b = breaker.New(g.cfg)
		g.breakers[taskType] = b
	}
	return b
}

// check reports whether a task of a type may be dispatched now, and if not,
// why. retry says whether the dispatch is a retry.
func (g *gate) check(now time.Time, taskType string, retry bool) (bool, string) {
	g.mu.Lock()
	all, allPaused := g.pauses[""]
	own, ownPaused := g.pauses[taskType]
	b := g.breakers[taskType]
	g.mu.Unlock()
	if why := pausedWhy(all, allPaused, "all types", retry); why != "" {
		return false, why
	}
	if why := pausedWhy(own, ownPaused, "type "+taskType, retry); why != "" {
		return false, why
	}
	if b == nil {
		return true, ""
	}
	switch st, _ := b.State(now); st {
	case breaker.Open:
		return false, "held: circuit breaker open for type " + taskType
	case breaker.HalfOpen:
		if !b.Allow(now) {
			return false, "held: circuit breaker half-open for type " + taskType + " (probes in flight)"
		}
	}
	return true, ""
}

// gateOpen reports whether a new task of a type may be dispatched now
// (taking a probe of a half-open breaker when it may).
func (o *Orchestrator) gateOpen(now time.Time, taskType string) bool {
	open, _ := o.gate.check(now, taskType, false)
	return open
}

// pausedWhy says why a pause holds a dispatch, or "" when it does not.
func pausedWhy(p task.Pause, paused bool, scope string, retry bool) string {
	switch {
	case !paused:
		return ""
	case p.RetriesOnly && retry:
		return "held: retries paused for " + scope
	case p.RetriesOnly:
		return ""
	}
	return "held: dispatch paused for " + scope
}

// apply updates the gate from a control bucket entry.
func (g *gate) apply(e jetstream.KeyValueEntry) {
	kind, taskType, ok := subject.ParseControlKey(e.Key())
	if !ok {
		return
	}
	deleted := e.Operation() != jetstream.KeyValuePut
	g.mu.Lock()
	g.revs[e.Key()] = e.Revision()
	if deleted {
		delete(g.revs, e.Key())
	}
	switch kind {
	case "pause":
		var p task.Pause
		if deleted || json.Unmarshal(e.Value(), &p) != nil {
			delete(g.pauses, taskType)
		} else {
			g.pauses[taskType] = p
		}
		g.mu.Unlock()
	case "limit":
		g.mu.Unlock()
		if g.limits != nil {
			g.limits.apply(taskType, e)
		}
	case "breaker":
		g.mu.Unlock()
		var s breaker.Snapshot
		if !deleted && json.Unmarshal(e.Value(), &s) == nil {
			g.breaker(taskType).Restore(s)
			g.mu.Lock()
			g.shared[taskType] = s.State
			g.sharedSince[taskType] = s.Since
			g.mu.Unlock()
		}
	default:
		g.mu.Unlock()
	}
}

func (g *gate) revision(key string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.revs[key]
}

// dueHalfOpen lists the types whose breaker turned half-open since it was
// shared — its cooldown passed, or its probes timed out and a fresh set is
// due — with the state shared before.
func (g *gate) dueHalfOpen(now time.Time) map[string]breaker.State {
	g.mu.Lock()
	type shared struct {
		st    breaker.State
		since time.Time
	}
	candidates := map[string]shared{}
	for t, st := range g.shared {
		if st == breaker.Open || st == breaker.HalfOpen {
			candidates[t] = shared{st, g.sharedSince[t]}
		}
	}
	g.mu.Unlock()
	due := map[string]breaker.State{}
	for t, sh := range candidates {
		snap := g.breaker(t).Snapshot(now)
		if snap.State == breaker.HalfOpen && (sh.st == breaker.Open || snap.Since.After(sh.since)) {
			due[t] = sh.st
		}
	}
	return due
}

// evictIdle forgets the breakers of types that are closed and recorded no
// outcome in the breaker's window: a new breaker would decide the same, and
// task types are chosen by submitters, so the map must not grow with every
// type ever seen. It returns the control keys of evicted breakers that were
// shared (closed), with their revisions, for the caller to delete.
func (g *gate) evictIdle(now time.Time) map[string]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	keys := map[string]uint64{}
	for typ, b := range g.breakers {
		snap := b.Snapshot(now)
		if snap.State != breaker.Closed || snap.Volume > 0 {
			continue
		}
		if st, ok := g.shared[typ]; ok && st != breaker.Closed {
			continue
		}
		delete(g.breakers, typ)
		delete(g.shared, typ)
		delete(g.sharedSince, typ)
		key := subject.ControlBreaker(typ)
		if rev := g.revs[key]; rev > 0 {
			keys[key] = rev
		}
	}
	return keys
}

// evictIdleBreakers drops idle closed breakers, here and in the control
// bucket (a delete checked against the revision seen, so a breaker another
// orchestrator just changed stays).
func (o *Orchestrator) evictIdleBreakers(ctx context.Context) {
	for key, rev := range o.gate.evictIdle(o.now()) {
		err := o.control.Delete(ctx, key, jetstream.LastRevision(rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			o.log.Debug("idle breaker not removed from the control bucket", slog.Any("error", err), slog.String("key", key))
		}
	}
	o.metrics.BreakersInMemory(o.gate.breakerCount())
}

func (g *gate) breakerCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.breakers)
}

// watchControl keeps the gate current until ctx ends. If the initial values
// do not arrive, the watch is stopped and an error returned (to retry).
func (o *Orchestrator) watchControl(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	w, err := o.control.WatchAll(ctx)
	if err != nil {
		stop()
		return fmt.Errorf("watch %s: %w", subject.BucketControl, err)
	}
	ready := make(chan struct{})
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		defer stop()
		defer w.Stop()
		initial := true
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil { // initial values delivered
					if initial {
						close(ready)
						initial = false
					}
					continue
				}
				o.gate.apply(e)
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-time.After(10 * time.Second):
		stop()
		return fmt.Errorf("watch %s: no initial values after 10s", subject.BucketControl)
	}
}

// breakerLoop moves open breakers to half-open once their cooldown passed.
func (o *Orchestrator) breakerLoop(ctx context.Context) {
	defer o.bg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	evict := time.NewTicker(max(o.gate.cfg.Window, time.Second))
	defer evict.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-evict.C:
			o.evictIdleBreakers(ctx)
			continue
		case <-t.C:
		}
		for typ, from := range o.gate.dueHalfOpen(o.now()) {
			reason := "cooldown passed; letting probes through"
			if from == breaker.HalfOpen {
				reason = "probes' outcomes did not arrive in time; letting a fresh set through"
			}
			if o.persistBreaker(ctx, typ, o.gate.breaker(typ), from, reason) {
				o.releaseHeld(ctx, typ, o.gate.cfg.Probes)
			}
		}
	}
}

// recordOutcome feeds an attempt's outcome to its type's breaker.
func (o *Orchestrator) recordOutcome(ctx context.Context, taskType string, success bool) {
	b := o.gate.breaker(taskType)
	now := o.now()
	before := b.Snapshot(now)
	st, changed := b.Record(now, success)
	if !changed {
		return
	}
	reason := fmt.Sprintf("failure ratio %.0f%% over %d attempts in %s", 100*before.FailureRatio, before.Volume, o.gate.cfg.Window)
	switch st {
	case breaker.Closed:
		reason = "probes succeeded"
	case breaker.Open:
		if before.State == breaker.HalfOpen {
			reason = "a probe failed"
		} else {
			s := b.Snapshot(now)
			reason = fmt.Sprintf("failure ratio %.0f%% over %d attempts in %s", 100*s.FailureRatio, s.Volume, o.gate.cfg.Window)
		}
	}
	if o.persistBreaker(ctx, taskType, b, before.State, reason) && st == breaker.Closed {
		o.releaseHeld(ctx, taskType, 0)
	}
}

// persistBreaker shares a breaker's new state through the control bucket
// (compare-and-set: when another orchestrator got there first, its state is
// taken instead) and records the change in the audit trail.
func (o *Orchestrator) persistBreaker(ctx context.Context, taskType string, b *breaker.Breaker, from breaker.State, reason string) bool {
	now := o.now()
	snap := b.Snapshot(now)
	data, _ := json.Marshal(snap)
	key := subject.ControlBreaker(taskType)
	rev := o.gate.revision(key)
	var err error
	if rev == 0 {
		rev, err = o.control.Create(ctx, key, data)
	} else {
		rev, err = o.control.Update(ctx, key, data, rev)
	}
	if err != nil {
		if e, gerr := o.control.Get(ctx, key); gerr == nil {
			o.gate.apply(e)
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			o.log.Warn("breaker state not saved", slog.Any("error", err), slog.String("type", taskType))
		}
		return false
	}
	o.gate.mu.Lock()
	o.gate.revs[key] = rev
	o.gate.shared[taskType] = snap.State
	o.gate.sharedSince[taskType] = snap.Since
	o.gate.mu.Unlock()
	o.log.Warn("circuit breaker changed", slog.String("type", taskType), slog.String("from", string(from)), slog.String("to", string(snap.State)), slog.String("reason", reason))
	o.audit(ctx, task.AuditEvent{Kind: "breaker", Key: taskType, From: string(from), To: string(snap.State), Reason: reason})
	return true
}

// audit records a non-task change on ax.audit.<kind>.<key>.
func (o *Orchestrator) audit(ctx context.Context, ev task.AuditEvent) {
	ev.At, ev.Actor = o.now(), o.cfg.NodeID
	data, _ := json.Marshal(ev)
	if _, err := o.js.Publish(ctx, subject.Audit(ev.Kind, ev.Key), data); err != nil {
		o.log.Warn("audit event not recorded", slog.Any("error", err), slog.String("kind", ev.Kind))
	}
}

// heldMarker is the body of ax.held.<type>.<id>.
type heldMarker struct {
	ID    string `json:"id"`
	Retry bool   `json:"retry,omitempty"`
}

// hold keeps a task back because its gate is closed: it publishes the
// marker, records why on the task (same state), and lets it go at once if
// the gate opened meanwhile (a release may have missed the marker).
func (o *Orchestrator) hold(ctx context.Context, t task.Task, rev uint64, why string, retry bool) (held bool, err error) {
	data, _ := json.Marshal(heldMarker{ID: t.ID, Retry: retry})
	if _, err := o.js.Publish(ctx, subject.Held(t.Type, t.ID), data); err != nil {
		return false, fmt.Errorf("hold %s: %w", t.ID, err)
	}
	if ok, _ := o.gate.check(o.now(), t.Type, retry); ok {
		return false, nil
	}
	o.metrics.DispatchHeld()
	if t.Reason == why {
		return true, nil
	}
	next := t
	if _, err := o.write(ctx, t, rev, &next, why); err != nil && !errors.Is(err, store.ErrConflict) {
		return true, err
	}
	return true, nil
}

// releaseHeld lets held tasks of a type ("" for all) go through their gate
// again, at most limit of them (0: all), in the background.
func (o *Orchestrator) releaseHeld(ctx context.Context, taskType string, limit int) {
	filter := subject.HeldAll
	if taskType != "" {
		filter = subject.HeldType(taskType)
	}
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		n, err := o.release(o.runCtx, filter, limit)
		if err != nil {
			o.log.Warn("releasing held tasks stopped early", slog.Any("error", err), slog.String("type", taskType), slog.Int("released", n))
			return
		}
		if n > 0 {
			o.log.Info("released held tasks", slog.String("type", taskType), slog.Int("released", n))
		}
	}()
}

func (o *Orchestrator) release(ctx context.Context, filter string, limit int) (int, error) {
	st, err := o.js.Stream(ctx, subject.StreamHeld)
	if err != nil {
		return 0, err
	}
	cons, done, err := scan.Open(ctx, o.js, subject.StreamHeld, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return 0, err
	}
	defer done()
	n := 0
	for limit == 0 || n < limit {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			return n, err
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			var m heldMarker
			if json.Unmarshal(msg.Data(), &m) == nil {
				if err := o.unhold(ctx, m); err != nil {
					return n, err
				}
				n++
			}
			if md, err := msg.Metadata(); err == nil {
				_ = st.DeleteMsg(ctx, md.Sequence.Stream) // gone already if re-held
			}
			if limit > 0 && n >= limit {
				break
			}
		}
		if got == 0 {
			return n, nil
		}
	}
	return n, nil
}

// unhold sends a held task through its gate again. A held retry gets a new
// start time from the retry budget, so a mass release is a trickle too.
func (o *Orchestrator) unhold(ctx context.Context, m heldMarker) error {
	t, rev, err := o.store.Get(ctx, m.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	switch t.State {
	case task.Waiting:
		return o.resolveWaiting(ctx, t, rev, false)
	case task.Retrying:
		at, err := o.allocateRetry(ctx, t.Type, retryHolder(t)+"#released", o.now())
		if err != nil {
			return err
		}
		next := t
		next.RetryAt = &at
		if _, err := o.write(ctx, t, rev, &next, "released from hold; retry at "+at.Format(time.RFC3339Nano)); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return nil
			}
			return err
		}
		return o.armRetry(ctx, next)
	}
	return nil
}
