package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Level is the backlog of one capability's priority level: the dispatches
// its ready consumer on AX_TASKS has still to deliver (Pending) or has
// delivered and not seen acknowledged (InHand), and how long the oldest
// undelivered one has waited. A dispatch that can no longer run — its task
// ended or was dispatched again under a new execution while it waited, and an
// executor would discard it — stays stored (it is the task's history
// entry) until a consumer delivers it; those at the head of a level (up to
// maxStaleRead of them: the ones a level nobody pulls keeps for ever) are
// not counted, and Oldest is the oldest dispatch that can still run.
type Level struct {
	Capability string
	Priority   int
	Pending    uint64
	InHand     uint64
	Oldest     time.Duration
}

// ReadyLevels reads every ready consumer of AX_TASKS (one per capability
// and priority that was ever dispatched on): a consumer info each, and one
// read of the oldest undelivered dispatch of each level with a backlog.
// Sorted by capability, then priority.
func ReadyLevels(ctx context.Context, js jetstream.JetStream, now time.Time) ([]Level, error) {
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, fmt.Errorf("ready levels: %w", err)
	}
	var out []Level
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		capability, prio, ok := subject.ParseReadyConsumer(ci.Name)
		if !ok {
			continue
		}
		lv := Level{Capability: capability, Priority: prio, Pending: ci.NumPending, InHand: uint64(max(ci.NumAckPending, 0))}
		if lv.Pending > 0 {
			headOfLevel(ctx, st, &lv, ci.Delivered.Stream+1, now)
		}
		out = append(out, lv)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("ready levels: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Capability != out[j].Capability {
			return out[i].Capability < out[j].Capability
		}
		return out[i].Priority < out[j].Priority
	})
	return out, nil
}

// maxStaleRead bounds the dispatches read at the head of a level to find
// the oldest that can still run (two reads each).
const maxStaleRead = 32

// headOfLevel reads the undelivered dispatches of lv from seq: the stale
// ones at its head (see Level) leave Pending, the first live one sets
// Oldest. A dispatch whose task's last event cannot be read counts as
// live (a replica that is behind errs the same way: towards counting).
func headOfLevel(ctx context.Context, st jetstream.Stream, lv *Level, seq uint64, now time.Time) {
	filter := subject.DispatchFilter(lv.Capability, lv.Priority)
	for i := 0; lv.Pending > 0; i++ {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if err != nil {
			return
		}
		if i == maxStaleRead || !stale(ctx, st, msg) {
			lv.Oldest = max(now.Sub(msg.Time), 0)
			return
		}
		lv.Pending--
		seq = msg.Sequence + 1
	}
}

// stale reports whether a dispatch can no longer run: its task's last
// event ended the task or moved it to another execution, or the task's
// history is gone with its retention. (A later event of the same
// execution — a dependent added, say — leaves it live.)
func stale(ctx context.Context, st jetstream.Stream, dispatch *jetstream.RawStreamMsg) bool {
	id, _, _, _, ok := subject.ParseDispatch(dispatch.Subject)
	if !ok {
		return false
	}
	last, err := st.GetLastMsgForSubject(ctx, subject.TaskHistory(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	if err != nil || last.Sequence <= dispatch.Sequence {
		return false // the dispatch itself, or a read from a replica behind it
	}
	var d, l task.Event
	if json.Unmarshal(dispatch.Data, &d) != nil || json.Unmarshal(last.Data, &l) != nil {
		return false
	}
	return l.Task.State.Terminal() || l.Task.ExecutionID != d.Task.ExecutionID
}

// ReadyDepth is how many dispatches wait in every ready level together:
// to be delivered, or delivered and not yet acknowledged.
func ReadyDepth(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	levels, err := ReadyLevels(ctx, js, time.Now())
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, lv := range levels {
		n += lv.Pending + lv.InHand
	}
	return n, nil
}
