package queue

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// Level is the backlog of one capability's priority level: the dispatches
// its ready consumer on AX_TASKS has still to deliver (Pending) or has
// delivered and not seen acknowledged (InHand), and how long the oldest
// undelivered one has waited. A dispatch withdrawn by the orchestrator
// (its task was cancelled or dispatched again while it waited) is no longer
// stored, and counts nowhere.
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
			msg, err := st.GetMsg(ctx, ci.Delivered.Stream+1, jetstream.WithGetMsgSubject(subject.DispatchFilter(capability, prio)))
			if err == nil {
				lv.Oldest = max(now.Sub(msg.Time), 0)
			}
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
