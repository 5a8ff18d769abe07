package fanin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/fanin"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

func TestMarkCountAndRead(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 30*time.Second)
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	m, err := fanin.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	const waiter = "job/a=1"
	for i := range 10 {
		st := task.Succeeded
		if i%4 == 3 {
			st = task.Failed
		}
		n, err := m.Mark(ctx, waiter, fmt.Sprint(9-i), task.MemberOutcome{Index: 9 - i, State: st})
		if err != nil || n != i+1 {
			t.Fatalf("mark %d: count %d, %v", i, n, err)
		}
	}
	// A replay, even in another state, is a no-op: the first marker stands
	// and the count does not move.
	if n, err := m.Mark(ctx, waiter, "0", task.MemberOutcome{Index: 0, State: task.Cancelled}); err != nil || n != 10 {
		t.Fatalf("replay: count %d, %v", n, err)
	}
	// Another waiter's markers do not count.
	if n, err := m.Mark(ctx, "job/b", "0", task.MemberOutcome{State: task.Succeeded}); err != nil || n != 1 {
		t.Fatalf("other waiter: count %d, %v", n, err)
	}
	exact, err := m.CountExact(ctx, waiter)
	if err != nil || exact != 10 {
		t.Fatalf("exact count %d, %v", exact, err)
	}
	if n, err := m.Count(ctx, waiter); err != nil || n != 10 {
		t.Fatalf("count %d, %v", n, err)
	}
	counts, err := m.Counts(ctx, waiter)
	if err != nil || counts[task.Succeeded] != 8 || counts[task.Failed] != 2 || counts[task.Cancelled] != 0 {
		t.Fatalf("counts %v, %v", counts, err)
	}
	outs, err := m.Outcomes(ctx, waiter, 10)
	if err != nil || len(outs) != 10 {
		t.Fatalf("outcomes %v, %v", outs, err)
	}
	for i, o := range outs {
		if o.Index != i {
			t.Fatalf("outcome %d has index %d", i, o.Index)
		}
	}
	if ended, err := m.Ended(ctx, waiter, "3"); err != nil || !ended {
		t.Fatalf("member 3 ended: %v, %v", ended, err)
	}
	if ended, err := m.Ended(ctx, waiter, "10"); err != nil || ended {
		t.Fatalf("member 10 ended: %v, %v", ended, err)
	}
	if err := m.Forget(ctx, waiter); err != nil {
		t.Fatal(err)
	}
	if err := m.Forget(ctx, waiter); err != nil { // idempotent
		t.Fatal(err)
	}
	if n, err := m.Count(ctx, waiter); err != nil || n != 0 {
		t.Fatalf("count after forget %d, %v", n, err)
	}
	if exact, err := m.CountExact(ctx, waiter); err != nil || exact != 10 { // the markers stay
		t.Fatalf("exact count after forget %d, %v", exact, err)
	}
}
