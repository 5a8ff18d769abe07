package executor_test

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

// TestExecutorsPassOnTypesTheyDoNotHandle: two executors of one
// capability with disjoint handlers share its ready queues. Each passes on
// the tasks it has no handler for, spending no attempt: 1,000 mixed tasks
// all succeed at their first attempt, each on the executor that handles
// its type. A task of a type neither handles waits, ready, its attempts
// unspent, until an executor that handles it starts.
func TestExecutorsPassOnTypesTheyDoNotHandle(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	var mu sync.Mutex
	ranOn := map[string]string{} // task id → executor
	handle := func(id string) executor.HandlerFunc {
		return func(_ context.Context, j *executor.Job) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := ranOn[j.ID]; ok {
				return nil, fmt.Errorf("%s ran twice (on %s and %s)", j.ID, prev, id)
			}
			ranOn[j.ID] = id
			return nil, nil
		}
	}
	mail := testenv.Executor(t, srv.URL(), executor.Config{ID: "mail", Capabilities: []string{"default"}})
	mail.Handle("email.send", handle("mail"))
	mail.Handle("email.bounce", handle("mail"))
	pdf := testenv.Executor(t, srv.URL(), executor.Config{ID: "pdf", Capabilities: []string{"default"}})
	pdf.Handle("pdf.render", handle("pdf"))
	testenv.Start(t, mail)
	testenv.Start(t, pdf)

	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 4*time.Minute)
	types := []string{"email.send", "pdf.render", "email.bounce"}
	var specs []task.Spec
	for i := range 1000 {
		specs = append(specs, spec(t, fmt.Sprint("t-", i), types[i%3], i%6, "default"))
	}
	orphan := spec(t, "orphan", "video.encode", 2, "default")
	if _, err := c.SubmitMany(ctx, append(specs, orphan)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, s := range specs {
		got, err := c.Wait(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"email.send": "mail", "email.bounce": "mail", "pdf.render": "pdf"}[s.Type]
		if got.State != task.Succeeded || got.Attempt != 1 || len(got.Errors) > 0 || got.Executor != want {
			t.Fatalf("%s (%s): %s at attempt %d on %q, errors %v; want succeeded at attempt 1 on %s",
				s.ID, s.Type, got.State, got.Attempt, got.Executor, got.Errors, want)
		}
	}
	t.Logf("1,000 tasks done in %v", time.Since(start))
	// The orphan has been passed on a few times by now (its delay doubles
	// from 10ms): it waits, no attempt spent.
	got, err := c.Get(ctx, orphan.ID)
	if err != nil || got.State != task.Ready || len(got.Errors) > 0 || got.Executor != "" {
		t.Fatalf("task of a type no executor handles: %+v %v; want it waiting, ready, with no attempt spent", got, err)
	}
	// Whichever executor of the capability pulls first takes each
	// redelivery: the new one gets the task within a few.
	video := testenv.Executor(t, srv.URL(), executor.Config{ID: "video", Capabilities: []string{"default"}})
	video.Handle("video.encode", handle("video"))
	testenv.Start(t, video)
	start = time.Now()
	got, err = c.Wait(ctx, orphan.ID)
	t.Logf("the orphan ran %v after its executor started", time.Since(start))
	if err != nil || got.State != task.Succeeded || got.Attempt != 1 || got.Executor != "video" {
		t.Fatalf("orphan once its executor came: %+v %v", got, err)
	}
}

// TestCancelledTaskIsNotPassedOn: the dispatch of a task nobody handles
// goes round the capability's executors until the task is cancelled; then
// the next executor it reaches drops it (its execution is revoked) instead
// of passing it on for ever.
func TestCancelledTaskIsNotPassedOn(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	mail := testenv.Executor(t, srv.URL(), executor.Config{ID: "mail", Capabilities: []string{"default"}})
	mail.HandleFunc("email.send", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, mail)
	c := testenv.Client(t, srv.URL())
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	cons, err := js.Consumer(ctx, subject.StreamTasks, subject.ReadyConsumer("default", 5))
	if err != nil {
		t.Fatal(err)
	}
	info := func() *jetstream.ConsumerInfo {
		t.Helper()
		ci, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ci
	}
	id, err := c.Submit(ctx, spec(t, "gone", "video.encode", 5, "default"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the dispatch passed on a few times", func() bool { return info().Delivered.Consumer >= 3 })
	if _, err := c.Cancel(ctx, id, "not needed"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the dispatch dropped", func() bool {
		ci := info()
		return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0
	})
}
