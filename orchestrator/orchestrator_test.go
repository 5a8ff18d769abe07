package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func TestSubmitRunSucceed(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("echo", func(ctx context.Context, j *executor.Job) (any, error) {
		return j.Payload, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 20*time.Second)

	id, err := c.Submit(ctx, task.Spec{Type: "echo", Payload: []byte(`{"n":1}`), Priority: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Succeeded || string(got.Result) != `{"n":1}` || got.Attempt != 1 || got.Executor != ex.ID() {
		t.Fatalf("got %+v", got)
	}
	h, err := c.History(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var path []task.State
	for _, ev := range h {
		path = append(path, ev.Event.To)
	}
	// A short attempt is never marked running: its report ends it.
	want := []task.State{task.Ready, task.Succeeded}
	if len(path) != len(want) {
		t.Fatalf("history %v, want %v", path, want)
	}
	for i := range want {
		if path[i] != want[i] {
			t.Fatalf("history %v, want %v", path, want)
		}
	}
}

func TestRetryThenDeadLetterThenRedrive(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	c, ctx := flakyStack(t, fail.Load)
	id, err := c.Submit(ctx, task.Spec{Type: "flaky", MaxRetries: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Failed || got.Attempt != 3 || len(got.Errors) != 3 {
		t.Fatalf("got %+v", got)
	}
	var dls []task.DeadLetter
	testenv.Eventually(t, 10*time.Second, "dead letter", func() bool {
		dls, err = c.DeadLetters(ctx)
		return err == nil && len(dls) == 1
	})
	if err != nil || len(dls) != 1 || dls[0].Spec.ID != id || len(dls[0].Attempts) != 3 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	fail.Store(false)
	if _, err := c.Redrive(ctx, id); err != nil {
		t.Fatal(err)
	}
	got, err = c.Wait(ctx, id)
	if err != nil || got.State != task.Succeeded || got.Redrives != 1 || got.Attempt != 1 {
		t.Fatalf("after redrive: %+v, %v", got, err)
	}
}

// TestTimersAndLooksAreConsumedApart: a task's timers (a retry here) and
// the reconciler's looks reach the orchestrator through two consumers of
// AX_TIMERS with disjoint filters, so a storm of looks cannot hold the
// workers a retry waits for.
func TestTimersAndLooksAreConsumedApart(t *testing.T) {
	t.Parallel()
	var failed atomic.Bool
	c, ctx := flakyStack(t, func() bool { return failed.CompareAndSwap(false, true) })
	id, err := c.Submit(ctx, task.Spec{Type: "flaky", MaxRetries: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded || got.Attempt != 2 {
		t.Fatalf("got %+v, %v; want succeeded at attempt 2", got, err)
	}
	js, _ := jetstream.New(c.Conn())
	info := func(name string) *jetstream.ConsumerInfo {
		t.Helper()
		cons, err := js.Consumer(ctx, subject.StreamTimers, name)
		if err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
		return ci
	}
	timers, looks := info(subject.ConsumerTimers), info(subject.ConsumerLooks)
	if !slices.Equal(timers.Config.FilterSubjects, subject.FireFilters(false)) || !slices.Equal(looks.Config.FilterSubjects, subject.FireFilters(true)) {
		t.Fatalf("filters: timers %v, looks %v", timers.Config.FilterSubjects, looks.Config.FilterSubjects)
	}
	if timers.Delivered.Consumer == 0 {
		t.Fatalf("the retry's timer was not delivered by %s: %+v", subject.ConsumerTimers, timers.Delivered)
	}
	// A look at a task that does not exist is taken by the looks' consumer.
	before := looks.AckFloor.Consumer
	body := fmt.Sprintf(`{"id":"no-such-task","kind":"watch","at":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := js.Publish(ctx, subject.Fire(subject.TimerWatch, "no-such-task"), []byte(body)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the look acknowledged by "+subject.ConsumerLooks, func() bool {
		return info(subject.ConsumerLooks).AckFloor.Consumer > before
	})
}

// flakyStack starts a server, an orchestrator and an executor whose
// "flaky" handler fails ("boom") whenever fail says so and returns "ok"
// otherwise, and returns a client and a 30 s context.
func flakyStack(t *testing.T, fail func() bool) (*sdk.Client, context.Context) {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("flaky", func(ctx context.Context, j *executor.Job) (any, error) {
		if fail() {
			return nil, errors.New("boom")
		}
		return "ok", nil
	})
	testenv.Start(t, ex)
	return testenv.Client(t, srv.URL()), testenv.Context(t, 30*time.Second)
}
