package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

// An in-memory AX_READY (TopologyOptions.ReadyInMemory) is bounded per
// level and in bytes, and the server refuses a dispatch beyond the bounds.
// Such a task is parked: held like a task whose gate is closed (waiting,
// a marker on ax.held.<type>.<id>, its watch armed), with a reason saying
// which level was full. Once a second the orchestrator looks at the levels
// it parked tasks of and releases, per level with room, as many of their
// types' markers as there is room for; each released task is dispatched
// again through the usual compare-and-set path (and parked again if the
// room went meanwhile). The watch releases a parked task the hint missed
// (an orchestrator restarted).

// parkedPrefix starts the reason of a parked task.
const parkedPrefix = "held: no room for its dispatch in "

// maxParkedHints bounds the levels and types the orchestrator remembers
// having parked tasks of; beyond, the watches release them.
const maxParkedHints = 10_000

// parked remembers, per ready level, the types of the tasks parked there.
type parked struct {
	mu     sync.Mutex
	levels map[string]map[string]bool // level subject → type → true
	n      int
	told   time.Time
}

func (p *parked) add(level, taskType string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.levels == nil || p.n >= maxParkedHints {
		p.levels, p.n = map[string]map[string]bool{}, 0
	}
	if p.levels[level] == nil {
		p.levels[level] = map[string]bool{}
	}
	if !p.levels[level][taskType] {
		p.levels[level][taskType] = true
		p.n++
	}
}

// take removes and returns the types parked on level.
func (p *parked) take(level string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for typ := range p.levels[level] {
		out = append(out, typ)
	}
	p.n -= len(out)
	delete(p.levels, level)
	return out
}

func (p *parked) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.levels))
	for l := range p.levels {
		out = append(out, l)
	}
	return out
}

// readyFull reports whether a dispatch was refused for want of room: a
// bound of AX_READY (per level, in bytes) or the server's memory.
func readyFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10023: // JSInsufficientResourcesErr: the server's memory
		return true
	case 10077: // JSStreamStoreFailedF: "maximum … exceeded"
		return strings.Contains(apiErr.Description, "maximum")
	}
	return false
}

// readyGone reports whether a dispatch found no AX_READY to store it.
func readyGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// parkFull holds a ready task whose dispatch found its level full.
func (o *Orchestrator) parkFull(ctx context.Context, t task.Task, rev uint64, cause error) error {
	level := subject.Ready(t.Capability, t.PriorityLevel())
	data, _ := json.Marshal(heldMarker{ID: t.ID})
	if _, err := o.js.Publish(ctx, subject.Held(t.Type, t.ID), data); err != nil {
		return fmt.Errorf("park %s: %w", t.ID, err)
	}
	o.parked.add(level, t.Type)
	next := t
	next.State = task.Waiting
	next.ExecutionID = ""
	next.ReadyAt = nil
	reason := parkedPrefix + level + " (" + cause.Error() + ")"
	if _, err := o.write(ctx, t, rev, &next, reason); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return o.lookAgain(ctx, t.ID) // moved on, or our write landed unanswered
		}
		return fmt.Errorf("park %s: %w", t.ID, err)
	}
	o.metrics.DispatchHeld()
	o.noteParked(level, cause)
	return o.armWatch(ctx, next)
}

// noteParked logs, at most once a minute, that dispatches are being parked.
func (o *Orchestrator) noteParked(level string, cause error) {
	o.parked.mu.Lock()
	tell := time.Since(o.parked.told) > time.Minute
	if tell {
		o.parked.told = time.Now()
	}
	o.parked.mu.Unlock()
	if tell {
		o.log.Warn("AX_READY has no room: tasks are held until their level has room (raise --ready-max-per-level / --ready-max-bytes, or add executors)",
			slog.String("level", level), slog.Any("error", cause))
	}
}

// releaseParked releases, for each level parked tasks wait on that now has
// room (at most half full, in a stream at most half full in bytes), up to
// that room of its types' held tasks.
func (o *Orchestrator) releaseParked(ctx context.Context) {
	perLevel := int(o.cfg.Topology.ReadyMaxPerLevel)
	if perLevel <= 0 {
		perLevel = topology.DefaultReadyMaxPerLevel
	}
	levels := o.parked.snapshot()
	if len(levels) == 0 {
		return
	}
	// The bound in bytes is the whole stream's: no level has room while
	// the stream is more than half full.
	st, err := o.js.Stream(ctx, subject.StreamReady)
	if err != nil {
		return
	}
	info := st.CachedInfo()
	byteRoom := readyByteRoom(info.Config.MaxBytes, info.State.Bytes, info.State.Msgs)
	if byteRoom <= 0 {
		return
	}
	for _, level := range levels {
		capability, prio, ok := subject.ReadyParts(level)
		if !ok {
			o.parked.take(level)
			continue
		}
		n, err := queue.Pending(ctx, o.ready, subject.ReadyConsumer(capability, prio), level)
		if err != nil || int(n) > perLevel/2 {
			continue
		}
		room := min(perLevel-int(n), byteRoom)
		for _, typ := range o.parked.take(level) {
			if room <= 0 {
				o.parked.add(level, typ)
				continue
			}
			released, err := o.release(ctx, subject.HeldType(typ), room)
			if err != nil {
				o.parked.add(level, typ) // look again at the next tick
				o.log.Warn("cannot release parked tasks yet", slog.Any("error", err), slog.String("type", typ))
				continue
			}
			if released >= room {
				o.parked.add(level, typ) // more may wait: look again at the next tick
			}
			room -= released
			byteRoom -= released
		}
	}
}

// releaseProbe is how many parked tasks are released into an empty
// AX_READY bounded in bytes, whose dispatches' size is not known yet.
const releaseProbe = 16

// readyByteRoom is how many more dispatches fit below half of AX_READY's
// bound in bytes, at the stored dispatches' average size (releaseProbe
// while none is stored); without a bound in bytes, no limit. Releasing
// more than fit would only park the rest again, each at the cost of a
// write.
func readyByteRoom(maxBytes int64, bytes, msgs uint64) int {
	switch {
	case maxBytes <= 0:
		return math.MaxInt
	case msgs == 0:
		return releaseProbe
	}
	half := uint64(maxBytes) / 2
	if bytes >= half {
		return 0
	}
	return int((half - bytes) / max(1, bytes/msgs))
}

// restoreReady recreates AX_READY when it is gone (an in-memory one after
// its server restarted), then fires every pending watch and sweep at once:
// each ready task dispatched before the stream's creation lost its dispatch
// (dispatchLost) and is dispatched again RunGrace after the creation, not
// on the reconciler's backed-off schedule (up to ReconcileMaxInterval).
func (o *Orchestrator) restoreReady(ctx context.Context) {
	if _, err := o.js.Stream(ctx, subject.StreamReady); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err := topology.EnsureReady(ctx, o.js, o.cfg.Topology); err != nil {
		o.log.Warn("AX_READY is gone and cannot be created yet; retrying", slog.Any("error", err))
		return
	}
	o.readySince.forget()
	o.log.Warn("AX_READY was gone (an in-memory stream after a server restart?) and is created again; the tasks whose dispatches it held are dispatched again after the run grace", slog.Duration("run_grace", o.cfg.RunGrace))
	o.bg.Add(1)
	go func() {
		defer o.bg.Done()
		n, err := o.refireLooks(o.runCtx)
		if err != nil {
			o.log.Warn("firing the reconciler's looks after AX_READY came back stopped early; the rest fire on their own schedule", slog.Any("error", err), slog.Int("fired", n))
			return
		}
		o.log.Info("fired the reconciler's looks after AX_READY came back", slog.Int("fired", n))
	}()
}

// refireLooks publishes, for every pending watch and sweep timer, a copy of
// it on its fire subject (the schedule stays: it fires again later and
// finds the task moved on). AX_TIMERS is a work queue, which allows no
// ordered reader: the timers' subjects are listed, and each read from the
// leader. Two requests per unfinished task, once per loss of AX_READY.
func (o *Orchestrator) refireLooks(ctx context.Context) (int, error) {
	st, err := o.js.Stream(ctx, subject.StreamTimers)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kind := range []subject.TimerKind{subject.TimerSweep, subject.TimerWatch} {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.Timer(kind, "*")))
		if err != nil {
			return n, err
		}
		for subj := range info.State.Subjects {
			msg, err := st.GetLastMsgForSubject(ctx, subj)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // fired meanwhile
			}
			if err != nil {
				return n, err
			}
			var f timerFire
			if len(msg.Data) == 0 || json.Unmarshal(msg.Data, &f) != nil || f.ID == "" {
				continue // a cancelled timer (an empty message) or garbage
			}
			if _, err := o.js.Publish(ctx, subject.Fire(kind, f.ID), msg.Data); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// dispatchLost reports whether t, ready, may have been dispatched before
// AX_READY was (re)created, and so have lost its dispatch with the stream
// it was in; since is the creation. A second of margin for clocks apart
// errs towards "lost": a dispatch taken for lost is superseded by a new one
// (executors drop the old execution), one taken for present would wait for
// the reconciler's backed-off looks.
//
// Only an in-memory AX_READY loses what it holds when its servers restart;
// one on disk answers false, and its dispatches are looked at as always.
func (o *Orchestrator) dispatchLost(ctx context.Context, t task.Task) (lost bool, since time.Time, err error) {
	created, inMemory, err := o.readySince.get(ctx, o.js)
	if err != nil || !inMemory {
		return false, created, err
	}
	return readyAt(t).Before(created.Add(time.Second)), created, nil
}

// streamCreated caches when AX_READY was created, and whether it is in
// memory, for a second.
type streamCreated struct {
	mu       sync.Mutex
	created  time.Time
	inMemory bool
	read     time.Time
}

func (c *streamCreated) get(ctx context.Context, js jetstream.JetStream) (time.Time, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && time.Since(c.read) < time.Second {
		return c.created, c.inMemory, nil
	}
	st, err := js.Stream(ctx, subject.StreamReady)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("when was %s created: %w", subject.StreamReady, err)
	}
	info := st.CachedInfo()
	c.created, c.inMemory, c.read = info.Created, info.Config.Storage == jetstream.MemoryStorage, time.Now()
	return c.created, c.inMemory, nil
}

func (c *streamCreated) forget() {
	c.mu.Lock()
	c.read = time.Time{}
	c.mu.Unlock()
}
