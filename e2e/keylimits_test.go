package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/task"
)

// TestConcurrencyLimitKill9: a limit of 5 per tenant over 8 worker
// processes; workers and the orchestrator are killed with kill -9 while
// the tenant's tasks run. Every task succeeds, and the attempts that ran
// (as their executors reported them) never overlapped more than 5 at once.
func TestConcurrencyLimitKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	orchArgs := []string{"--key-limit", "tenant.*:concurrency=5", "--run-grace", "3s", "--reconcile-interval", "2s"}
	orch := c.startOrchestrator("orch-1", orchArgs...)
	var workers []*proc
	for i := range 8 {
		workers = append(workers, c.startWorker(fmt.Sprint("worker-", i), "--ack-wait", "2s"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var ids []string
	var specs []task.Spec
	for i := range 150 {
		s, err := task.New(demo.TypeSleep, demo.Params{Sleep: "100ms", Label: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.ConcurrencyKey = fmt.Sprint("limited-", i), "tenant.a"
		specs = append(specs, s)
		ids = append(ids, s.ID)
	}
	if _, err := cl.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "30 tasks done", func() (bool, string) {
		n := 0
		for _, id := range ids {
			if got, err := cl.Get(ctx, id); err == nil && got.State == task.Succeeded {
				n++
			}
		}
		return n >= 30, fmt.Sprint(n, " done")
	})
	workers[0].kill9()
	workers[1].kill9()
	orch.kill9()
	c.startOrchestrator("orch-2", orchArgs...)
	c.startWorker("worker-8", "--ack-wait", "2s")

	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, id := range ids {
		got, err := cl.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %s %v", id, got.State, err)
		}
		// Every attempt's run, from the reports: the record keeps the
		// last attempt's; failed ones are in its history.
		for _, r := range history(t, cl, id) {
			ev := r.Event
			if ev.Task.StartedAt == nil || ev.Task.FinishedAt == nil || ev.From == ev.To {
				continue
			}
			if ev.To == task.Succeeded || ev.To == task.Retrying {
				edges = append(edges, edge{*ev.Task.StartedAt, 1}, edge{*ev.Task.FinishedAt, -1})
			}
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	running, peak := 0, 0
	for _, e := range edges {
		running += e.delta
		peak = max(peak, running)
	}
	if peak > 5 {
		t.Errorf("%d attempts of tenant.a ran at once; the limit is 5", peak)
	}
	if peak < 2 {
		t.Errorf("at most %d attempt ran at once: the limit of 5 was not used", peak)
	}
	t.Logf("peak concurrency %d of 5 over %d attempts", peak, len(edges)/2)
}

// TestFairnessQueueKill9: the orchestrator holding tasks queued for their
// fairness key's turn is killed with kill -9. Its queue dies with it; the
// next orchestrator finds the sweeps naming the gone owner (its tasks'
// looks) within seconds, and dispatches them again: every task succeeds.
func TestFairnessQueueKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	orchArgs := []string{"--fair-window", "4", "--reconcile-interval", "2s", "--run-grace", "3s"}
	orch := c.startOrchestrator("orch-1", orchArgs...)
	c.startWorker("worker-1", "--capacity", "2", "--ack-wait", "2s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var ids []string
	var specs []task.Spec
	for i := range 120 {
		s, err := task.New(demo.TypeSleep, demo.Params{Sleep: "50ms", Label: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		tenant := "a"
		if i%10 == 9 {
			tenant = "b"
		}
		s.ID, s.FairnessKey = fmt.Sprint("fair-", tenant, "-", i), tenant
		specs = append(specs, s)
		ids = append(ids, s.ID)
	}
	if _, err := cl.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "10 tasks done", func() (bool, string) {
		n := 0
		for _, id := range ids {
			if got, err := cl.Get(ctx, id); err == nil && got.State == task.Succeeded {
				n++
			}
		}
		return n >= 10, fmt.Sprint(n, " done")
	})
	orch.kill9()
	c.startOrchestrator("orch-2", orchArgs...)
	takenOver := 0
	for _, id := range ids {
		got, err := cl.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %s %v", id, got.State, err)
		}
		for _, r := range history(t, cl, id) {
			if strings.Contains(r.Event.Reason, "the orchestrator that queued it for its fairness key's turn is gone") {
				takenOver++
				break
			}
		}
	}
	if takenOver == 0 {
		t.Error("no task was taken over from the killed orchestrator's queue: the test shows nothing")
	}
	t.Logf("%d tasks taken over from the killed orchestrator's fairness queue", takenOver)
}
