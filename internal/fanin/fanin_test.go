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
		if err := m.Mark(ctx, waiter, fmt.Sprint(9-i), task.MemberOutcome{Index: 9 - i, State: st}); err != nil {
			t.Fatal(err)
		}
	}
	// A replay, even in another state, is a no-op: the first marker stands.
	if err := m.Mark(ctx, waiter, "0", task.MemberOutcome{Index: 0, State: task.Cancelled}); err != nil {
		t.Fatal(err)
	}
	// Another waiter's markers do not count.
	if err := m.Mark(ctx, "job/b", "0", task.MemberOutcome{State: task.Succeeded}); err != nil {
		t.Fatal(err)
	}
	exact, err := m.CountExact(ctx, waiter)
	if err != nil || exact != 10 {
		t.Fatalf("exact count %d, %v", exact, err)
	}
	testenv.Eventually(t, 5*time.Second, "fast count 10", func() bool {
		n, err := m.Count(ctx, waiter)
		return err == nil && n == 10
	})
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
	if n, err := m.Count(ctx, waiter); err != nil || n != 10 { // re-created on use
		t.Fatalf("count after forget %d, %v", n, err)
	}
}
