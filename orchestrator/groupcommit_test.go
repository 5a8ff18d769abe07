package orchestrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// commitCounts records how the orchestrator's record writes were published.
type commitCounts struct {
	orchestrator.NopMetrics
	mu  sync.Mutex
	how map[string]int
}

func (c *commitCounts) RecordsCommitted(n int, how string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.how[how] += n
}

func (c *commitCounts) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.how))
	for k, v := range c.how {
		out[k] = v
	}
	return out
}

// With group commit on, a large SubmitMany that no orchestrator takes
// directly (none runs) is stored as atomic batches, and the orchestrator's
// record writes go through its committer: every task runs once and
// succeeds. Submitting the same specs again (a producer retrying after a
// lost answer) creates no task twice.
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	on := true
	counts := &commitCounts{how: map[string]int{}}
	srv := testenv.NATS(t)
	// Group commit turned on for the deployment (an orchestrator records
	// it at start); the client reads it when it is made.
	setup, err := orchestrator.New(testenv.Conn(t, srv.URL()), orchestrator.Config{Logger: testenv.SlogLogger(t), Topology: orchestrator.TopologyOptions{GroupCommit: &on}})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := setup.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	ex.HandleFunc("ok", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		runs[j.ID]++
		mu.Unlock()
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)

	// Submissions as published, headers included.
	published, err := c.Conn().SubscribeSync("task.*.ok")
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = newSpec(fmt.Sprintf("gc-%03d", i), "ok")
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: counts})
	for i := range n {
		if got, err := c.Wait(ctx, specs[i].ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", specs[i].ID, got, err)
		}
	}
	js, _ := jetstream.New(c.Conn())
	submits, err := js.Stream(ctx, subject.StreamSubmit)
	if err != nil {
		t.Fatal(err)
	}
	if got := submits.CachedInfo().State.LastSeq; got != n {
		t.Fatalf("%d submissions stored, want %d", got, n)
	}
	first, err := published.NextMsg(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first.Header.Get("Nats-Batch-Id") == "" {
		t.Fatalf("the first submission was not published in an atomic batch: headers %v", first.Header)
	}
	_ = published.Unsubscribe()
	written := 0
	for _, v := range counts.get() {
		written += v
	}
	if written < 2*n {
		t.Fatalf("the committer published %d record writes (%v), want at least 2 per task", written, counts.get())
	}

	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatalf("submitting the same specs again: %v", err)
	}
	ids, err := c.TaskIDs(ctx, "gc-")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d tasks after submitting the same %d specs twice", len(ids), n)
	}
	for i := range n {
		if got, err := c.Wait(ctx, specs[i].ID); err != nil || got.State != task.Succeeded || got.Attempt != 1 {
			t.Fatalf("%s after the second submission: %+v %v", specs[i].ID, got, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range runs {
		if k != 1 {
			t.Fatalf("%s ran %d times", id, k)
		}
	}
	if len(runs) != n {
		t.Fatalf("%d tasks ran, want %d", len(runs), n)
	}
}
