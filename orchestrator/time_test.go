package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func okExecutor(t *testing.T, url string, cfg executor.Config) *executor.Executor {
	ex := testenv.Executor(t, url, cfg)
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	return ex
}

// pendingTimers is 1 if a task's timer of a kind is armed (a message
// schedule on its subject; a cancelled timer leaves a plain message that
// expires), else 0.
func pendingTimers(t *testing.T, c *sdk.Client, kind subject.TimerKind, id string) int {
	t.Helper()
	js, _ := jetstream.New(c.Conn())
	st, err := js.Stream(context.Background(), subject.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(context.Background(), subject.Timer(kind, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get(subject.HeaderSchedule) == "" {
		return 0
	}
	return 1
}

func TestDelayedTasks(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{}))
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)

	delayed := newSpec("delayed", "ok")
	delayed.Delay = task.Duration(time.Second)
	at := time.Now().Add(1500 * time.Millisecond).UTC()
	runAt := newSpec("run-at", "ok")
	runAt.RunAt = &at
	// Dependencies done long before its time: it still waits for run_at.
	withDeps := newSpec("after-deps", "ok", "delayed")
	withDeps.RunAt = &at
	if _, err := c.SubmitGraph(ctx, []task.Spec{delayed, runAt, withDeps}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "run-at accepted", func() bool {
		_, err := c.Get(ctx, "run-at")
		return err == nil
	})
	got, _ := c.Get(ctx, "run-at")
	if got.State != task.Waiting || !strings.Contains(got.Reason, "scheduled for") {
		t.Fatalf("before its time: %+v", got)
	}
	for _, id := range []string{"delayed", "run-at", "after-deps"} {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
		if got.ReadyAt.Before(*got.StartAt) {
			t.Fatalf("%s dispatched at %v, before its start time %v", id, got.ReadyAt, got.StartAt)
		}
	}

	// Cancelling a delayed task removes its timer.
	later := time.Now().Add(time.Hour)
	far := newSpec("far", "ok")
	far.RunAt = &later
	if _, err := c.Submit(ctx, far); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "timer armed", func() bool { return pendingTimers(t, c, subject.TimerStart, "far") == 1 })
	if got, err := c.Cancel(ctx, "far", ""); err != nil || got.State != task.Cancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if n := pendingTimers(t, c, subject.TimerStart, "far"); n != 0 {
		t.Fatalf("%d start timers left after cancel", n)
	}
}

func TestDeadlineExpiresWhereverTheTaskIs(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	// A started attempt is marked running at its first heartbeat, not at
	// its start: "running" has to be marked before its deadline, or the
	// deadline finds it ready.
	ex := testenv.Executor(t, srv.URL(), executor.Config{Heartbeat: 100 * time.Millisecond})
	handlerEnded := make(chan error, 1)
	ex.HandleFunc("block", func(ctx context.Context, _ *executor.Job) (any, error) {
		<-ctx.Done()
		handlerEnded <- ctx.Err()
		return nil, ctx.Err()
	})
	ex.HandleFunc("snooze", func(context.Context, *executor.Job) (any, error) {
		return nil, executor.RetryAfter(time.Hour, errors.New("later"))
	})
	ex.HandleFunc("warm", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	// The executor is taking the default capability's dispatches before
	// the TTLs below start: "running" must start and be marked well
	// before its deadline, not race the creation of the capability's
	// consumers and the executor's first pulls from them.
	if _, err := c.Submit(ctx, newSpec("warm", "warm")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "warm"); err != nil || got.State != task.Succeeded {
		t.Fatalf("warm-up: %+v %v", got, err)
	}

	ttl := task.Duration(1500 * time.Millisecond)
	unserved := newSpec("queued", "x")
	unserved.Capability = "nobody"
	unserved.TTL = ttl
	upstream := newSpec("upstream", "x")
	upstream.Capability = "nobody"
	onDeps := newSpec("on-deps", "x", "upstream")
	onDeps.TTL = ttl
	retrying := newSpec("retrying", "snooze")
	retrying.TTL = ttl
	running := newSpec("running", "block")
	running.TTL = task.Duration(5 * time.Second) // its first heartbeat's mark comes 50 times sooner
	downstream := newSpec("downstream", "x", "running")
	if _, err := c.SubmitGraph(ctx, []task.Spec{unserved, upstream, onDeps, retrying, running, downstream}); err != nil {
		t.Fatal(err)
	}
	for id, while := range map[string]string{"queued": "ready", "on-deps": "waiting", "retrying": "retrying", "running": "running"} {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Expired || !strings.HasSuffix(got.Reason, "passed while "+while) {
			t.Fatalf("%s: %+v %v; want expired while %s", id, got, err, while)
		}
	}
	if err := <-handlerEnded; err == nil {
		t.Fatal("running handler's context was not cancelled")
	}
	got, err := c.Wait(ctx, "downstream")
	if err != nil || got.State != task.Cancelled || got.Reason != "upstream running is expired" {
		t.Fatalf("downstream: %+v %v", got, err)
	}
	// The expiry's effects disarm the retry timer after the terminal
	// record (which Wait returns on) is written: wait for it.
	testenv.Eventually(t, 10*time.Second, "the retry timer disarmed by the expiry", func() bool {
		return pendingTimers(t, c, subject.TimerRetry, "retrying") == 0
	})
}

func TestDispatchTimeout(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	s := newSpec("orphan", "ok")
	s.Capability = "tpu"
	s.DispatchTimeout = task.Duration(300 * time.Millisecond)
	s.MaxDispatches = 2
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "orphan")
	if err != nil || got.State != task.Failed || !strings.Contains(got.Reason, `no executor took capability "tpu"`) {
		t.Fatalf("%+v %v", got, err)
	}
	tr := transitions(t, c, "orphan")
	if count(tr, "ready>ready") != 1 {
		t.Fatalf("history %v: want one re-dispatch", tr)
	}
	var dls []task.DeadLetter
	testenv.Eventually(t, 10*time.Second, "dead letter", func() bool {
		dls, _ = c.DeadLetters(ctx)
		return len(dls) == 1
	})
	if len(dls) != 1 || !strings.Contains(dls[0].Reason, "tpu") {
		t.Fatalf("dead letters %+v", dls)
	}

	// An executor that appears after the first timeout runs a re-dispatch.
	// Enough dispatches that its start-up never races the last one.
	s2 := newSpec("late-executor", "ok")
	s2.Capability = "fpga"
	s2.DispatchTimeout = task.Duration(500 * time.Millisecond)
	s2.MaxDispatches = 100
	if _, err := c.Submit(ctx, s2); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "re-dispatched", func() bool {
		got, err := c.Get(ctx, "late-executor")
		return err == nil && got.Dispatches == 2
	})
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"fpga"}}))
	got, err = c.Wait(ctx, "late-executor")
	if err != nil || got.State != task.Succeeded || got.Attempt != 1 || got.Dispatches < 2 {
		t.Fatalf("%+v %v", got, err)
	}
}

// TestTimersSurviveRestarts stops the orchestrator and then the NATS server
// while delayed tasks, retries and deadlines are pending.
func TestTimersSurviveRestarts(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	url := srv.URL()
	orch := testenv.Orchestrator(t, url, orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, url, executor.Config{})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("flaky", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, executor.RetryAfter(2*time.Second, errors.New("first attempt fails"))
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, 60*time.Second)
	delayed := newSpec("delayed", "ok")
	delayed.Delay = task.Duration(2 * time.Second)
	expiring := newSpec("expiring", "x")
	expiring.Capability = "nobody"
	expiring.TTL = task.Duration(2 * time.Second)
	if _, err := c.SubmitGraph(ctx, []task.Spec{delayed, expiring, newSpec("flaky", "flaky")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "flaky retrying", func() bool {
		got, err := c.Get(ctx, "flaky")
		return err == nil && got.State == task.Retrying
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := orch.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	srv, err = srv.Restart() // the timers live in the stream, not in a process
	if err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, url, orchestrator.Config{Retry: fastRetry})
	for id, want := range map[string]task.State{"delayed": task.Succeeded, "expiring": task.Expired, "flaky": task.Succeeded} {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != want {
			t.Fatalf("%s: %+v %v; want %s", id, got, err, want)
		}
	}
}

// A start time only a few milliseconds ahead is fired at once (too close to
// schedule), so the fire lands before the start time: the task must still
// be released, not left waiting.
func TestStartTimeJustAhead(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{}))
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	var ids []string
	for i := range 20 {
		s := newSpec(fmt.Sprint("soon-", i), "ok")
		at := time.Now().Add(time.Duration(20+i) * time.Millisecond).UTC()
		s.RunAt = &at
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := c.Wait(wctx, id)
		cancel()
		if err != nil || got.State != task.Succeeded {
			now, _ := c.Get(ctx, id)
			t.Fatalf("%s: %v; it is %s: %s", id, err, now.State, now.Reason)
		}
		if got.StartedAt.Before(*got.StartAt) {
			t.Fatalf("%s started at %s, before its run_at %s", id, got.StartedAt, got.StartAt)
		}
	}
}
