package orchestrator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestReportsGoToTheOrchestratorThatDispatched: with two orchestrators
// sharing the work, each attempt's report goes to the one that wrote its
// dispatch, which has the record in memory, and reads nothing back (sent
// to either, half the reports would read theirs: 148 of 300). A report
// may outrun the acknowledgement of its dispatch's write to the
// orchestrator, which then finds no record in memory yet and reads it (1 of
// 300 once, under the race detector): at most 5 % may. One orchestrator's
// node id is no subject token (it hashes).
func TestReportsGoToTheOrchestratorThatDispatched(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	a := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "orch-a"})
	b := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "orch.b"})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 64})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)

	const n = 300
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = newSpec(fmt.Sprintf("affine-%d", i), "ok")
	}
	// In batches of 10, so both orchestrators take some.
	for i := 0; i < n; i += 10 {
		if _, err := c.SubmitMany(ctx, specs[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	actors := map[string]int{}
	for _, s := range specs {
		got, err := c.Wait(ctx, s.ID)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %v %v", s.ID, got.State, err)
		}
		h, err := c.History(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range h {
			if e.Event.To == task.Succeeded {
				actors[e.Event.Actor]++
			}
		}
	}
	if actors["orch-a"] == 0 || actors["orch.b"] == 0 || actors["orch-a"]+actors["orch.b"] != n {
		t.Fatalf("outcomes written by %v: want both orchestrators, %d in all", actors, n)
	}
	if reads := a.StoreReads() + b.StoreReads(); reads > n/20 {
		t.Fatalf("%d task records read back (outcomes by %v); want at most %d", reads, actors, n/20)
	}
}
