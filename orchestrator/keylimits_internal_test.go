package orchestrator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestSlotWaitThatLostItsWriteLooksAgain: a task's wait for a slot whose
// write of the reason loses its compare-and-set — the record moved on, or
// the write landed with its answer lost — arms the task's watch a second
// ahead instead of leaving it to whoever moved it (who may have failed
// right after: a chaos run left 30 tasks without a trigger so).
func TestSlotWaitThatLostItsWriteLooksAgain(t *testing.T) {
	t.Parallel()
	nc := internalConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := task.KeyLimit{Key: "k", Concurrency: 1}
	o := startOn(ctx, t, nc, Config{ReconcileInterval: time.Minute, KeyLimits: []task.KeyLimit{limit}})
	c, err := sdk.New(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	// a takes the slot (nobody runs it), b waits.
	for _, id := range []string{"a", "b"} {
		s, _ := task.New("work", nil)
		s.ID, s.ConcurrencyKey = id, "k"
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var b task.Task
	var rev uint64
	for {
		if b, rev, err = o.store.Get(ctx, "b"); err == nil && strings.HasPrefix(b.Reason, slotHeldPrefix) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("b does not wait: %+v %v", b, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A stale view of b: before its reason was written, one revision ago.
	stale := b
	stale.Reason = "submitted"
	if held, _, _, err := o.waitForSlot(ctx, stale, rev-1, limit, 1, 1); err != nil || !held {
		t.Fatalf("wait with a stale revision: held %v, %v", held, err)
	}
	js, _ := jetstream.New(nc)
	timers, err := js.Stream(ctx, subject.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	m, err := timers.GetLastMsgForSubject(ctx, subject.Timer(subject.TimerEffects, "b"))
	if err != nil {
		t.Fatal(err)
	}
	var f timerFire
	if err := json.Unmarshal(m.Data, &f); err != nil {
		t.Fatal(err)
	}
	if ahead := time.Until(f.At); ahead > 10*time.Second {
		t.Fatalf("b's effects timer is %s ahead, want about a second (the look again after the lost compare-and-set)", ahead)
	}
}
