package lifecycle

import (
	"strconv"
	"time"

	"github.com/ax-run/ax/task"
)

// Effect is one thing that follows from a task's record being in its
// state. Each is idempotent: applying it again changes nothing.
type Effect uint8

// The effects, in the order Effects lists them.
const (
	// DisarmTimers removes an ended task's timers (and an event task's
	// wait marker).
	DisarmTimers Effect = iota + 1
	// ArmForget arms the timer that forgets an ended task after its
	// retention.
	ArmForget
	// EndFanIn: a shard reports its end to its parent; a sharded parent
	// that did not succeed cancels its unfinished shards; a fan-in
	// waiter's counter is removed.
	EndFanIn
	// FreeSlot frees the concurrency slot an ended attempt held (the task
	// has a concurrency key and an attempt that is not ready or running).
	FreeSlot
	// ArmWatch arms the reconciler's look at a waiting or retrying task,
	// should nothing else move it.
	ArmWatch
	// EnsureShards registers a planned parent's shards and checks whether
	// they all ended.
	EnsureShards
	// CheckSlot looks whether a task parked for a concurrency slot can
	// take one.
	CheckSlot
	// ArmStart arms the timer of a delayed task's start time.
	ArmStart
	// ResolveWaiting decides a waiting task by its dependencies' states
	// and trigger rule (releases, cancels or leaves it).
	ResolveWaiting
	// Dispatch admits a ready task and publishes its dispatch, with the
	// sweep entry that finds it lost.
	Dispatch
	// ArmRetry arms a retrying task's retry timer.
	ArmRetry
	// ReleaseDependents resolves the dependents of a task that succeeded.
	ReleaseDependents
	// DeadLetter stores a failed task's dead-letter entry.
	DeadLetter
	// CancelDependents resolves the dependents of a task that did not
	// succeed (their trigger rules decide).
	CancelDependents
	// Revoke records that a cancelled or expired task's execution no
	// longer runs, for the executors.
	Revoke
	// MatchEvent registers an event task's wait (its marker, its timeout)
	// and looks for its event, which may have been published before.
	MatchEvent
	// WatchCancel registers the cancel_on of an unfinished task (its
	// marker) and looks for an event that cancels it, which may have been
	// stored since the task was accepted.
	WatchCancel
)

var effectNames = [...]string{"", "disarm_timers", "arm_forget", "end_fan_in", "free_slot", "arm_watch",
	"ensure_shards", "check_slot", "arm_start", "resolve_waiting", "dispatch", "arm_retry",
	"release_dependents", "dead_letter", "cancel_dependents", "revoke", "match_event", "watch_cancel"}

// String names the effect, such as "dispatch".
func (e Effect) String() string {
	if int(e) < len(effectNames) && e != 0 {
		return effectNames[e]
	}
	return "effect(" + strconv.Itoa(int(e)) + ")"
}

// Effects appends to out (a caller's buffer: at most six effects follow
// from a record) what follows from t's record at now, in the order they
// are applied. Every unfinished task's list holds what stores its durable
// trigger (a waiting or retrying task's watch, a ready task's dispatch),
// except a running task's: its dispatch, delivered and not yet
// acknowledged, is its trigger.
//
// A task with a cancel_on has WatchCancel last in every state but running
// and the final ones: it registers when it is created (waiting or ready)
// and looks again at each later change and reconciler look; a running
// task's marker was stored before it ran.
func Effects(out []Effect, t *task.Task, now time.Time) []Effect {
	out = effects(out, t, now)
	if t.CancelOn != nil && !t.State.Terminal() && t.State != task.Running {
		out = append(out, WatchCancel)
	}
	return out
}

func effects(out []Effect, t *task.Task, now time.Time) []Effect {
	if t.State.Terminal() {
		out = append(out, DisarmTimers, ArmForget, EndFanIn)
	}
	if t.ConcurrencyKey != "" && t.Attempt > 0 && t.State != task.Ready && t.State != task.Running {
		out = append(out, FreeSlot)
	}
	if t.State == task.Waiting || t.State == task.Retrying {
		out = append(out, ArmWatch)
	}
	switch t.State {
	case task.Waiting:
		switch {
		case t.Phase == task.PhaseShards:
			return append(out, EnsureShards)
		case t.Parked:
			return append(out, CheckSlot)
		case AwaitingEvent(t):
			return append(out, MatchEvent)
		}
		if t.StartAt != nil && t.StartAt.After(now) {
			out = append(out, ArmStart)
		}
		return append(out, ResolveWaiting)
	case task.Ready:
		return append(out, Dispatch)
	case task.Retrying:
		return append(out, ArmRetry)
	case task.Succeeded:
		return append(out, ReleaseDependents)
	case task.Failed:
		return append(out, DeadLetter, CancelDependents)
	case task.Cancelled, task.Expired:
		return append(out, Revoke, CancelDependents)
	}
	return out
}
