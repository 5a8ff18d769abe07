package orchestrator_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestRecordSizeIsFlatInFanOut: the bytes AX_TASKS holds grow linearly with
// the number of dependents of one task, and the upstream's record stays the
// same size: dependents are edges outside the record. (Records used to list
// every dependent and be rewritten at each registration: 2.0 / 6.9 / 25.2 MiB
// for 500 / 1,000 / 2,000 dependents.) AX_LONG=1 runs 500 to 10,000.
func TestRecordSizeIsFlatInFanOut(t *testing.T) {
	t.Parallel()
	sizes := []int{250, 500, 1000}
	if os.Getenv("AX_LONG") != "" {
		sizes = []int{500, 1000, 2000, 10000}
	}
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 5*time.Minute)
	js, _ := jetstream.New(c.Conn())
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	var perDependent []float64
	for _, n := range sizes {
		up := fmt.Sprintf("up-%d", n)
		root := newSpec(up, "ok")
		root.Capability = "nobody" // stays ready: its dependents wait
		if _, err := c.Submit(ctx, root); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 20*time.Second, up+" ready", func() bool {
			got, err := c.Get(ctx, up)
			return err == nil && got.State == task.Ready
		})
		before, err := tasks.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		specs := make([]task.Spec, n)
		for i := range specs {
			specs[i] = newSpec(fmt.Sprintf("%s-dep-%d", up, i), "ok", up)
		}
		for chunk := range chunks(specs, 500) {
			if _, err := c.SubmitGraph(ctx, chunk); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 2*time.Minute, fmt.Sprintf("%d dependents of %s registered", n, up), func() bool {
			deps, err := c.Dependents(ctx, up)
			return err == nil && len(deps) == n
		})
		// Every dependent is created and registered: its edge exists.
		testenv.Eventually(t, time.Minute, "last dependent waiting", func() bool {
			got, err := c.Get(ctx, specs[n-1].ID)
			return err == nil && got.State == task.Waiting
		})
		after, err := tasks.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		grew := after.State.Bytes - before.State.Bytes
		last, err := tasks.GetLastMsgForSubject(ctx, subject.TaskHistory(up))
		if err != nil {
			t.Fatal(err)
		}
		per := float64(grew) / float64(n)
		perDependent = append(perDependent, per)
		t.Logf("%5d dependents: AX_TASKS grew %.2f MiB (%.0f bytes per dependent); the upstream's record is %d bytes",
			n, float64(grew)/(1<<20), per, len(last.Data))
		if len(last.Data) > 4096 {
			t.Fatalf("%s's record is %d bytes with %d dependents: it grows with its fan-out", up, len(last.Data), n)
		}
	}
	// Linear: the cost per dependent does not grow with the fan-out (a
	// quadratic record doubles it at each doubling).
	if first, lastPer := perDependent[0], perDependent[len(perDependent)-1]; lastPer > 1.5*first {
		t.Fatalf("bytes per dependent grew from %.0f to %.0f with the fan-out", first, lastPer)
	}
}

// TestRecordKeepsLastAttempts: a task failing many times keeps the last
// task.KeepAttempts errors in its record and dead letter; its events keep
// every one.
func TestRecordKeepsLastAttempts(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("fails", func(_ context.Context, j *executor.Job) (any, error) {
		return nil, fmt.Errorf("attempt %d failed", j.Attempt)
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 3*time.Minute)
	s := newSpec("many", "fails")
	s.MaxRetries = new(8)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "many")
	if err != nil || got.State != task.Failed {
		t.Fatalf("many: %v %v", got, err)
	}
	if len(got.Errors) != task.KeepAttempts || got.Errors[0].Attempt != 9-task.KeepAttempts+1 || got.Errors[task.KeepAttempts-1].Attempt != 9 {
		t.Fatalf("record keeps %d errors: %+v", len(got.Errors), got.Errors)
	}
	var dl *task.DeadLetter
	testenv.Eventually(t, 20*time.Second, "the dead letter", func() bool {
		dls, err := c.DeadLetters(ctx)
		for i := range dls {
			if dls[i].Spec.ID == "many" {
				dl = &dls[i]
			}
		}
		return err == nil && dl != nil
	})
	if len(dl.Attempts) != task.KeepAttempts {
		t.Fatalf("dead letter keeps %d attempts", len(dl.Attempts))
	}
	h, err := c.History(ctx, "many")
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	for _, ev := range h {
		if ev.Event.To == task.Retrying || ev.Event.To == task.Failed {
			failures++
		}
	}
	if failures != 9 {
		t.Fatalf("history holds %d failures, want 9", failures)
	}
}

// chunks splits s into slices of at most n.
func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// TestUrgentSubmissionIsNotQueuedBehindABurst: each priority has its own
// intake lane, so a p0 submitted behind a burst of p5 submissions is created
// and runs while most of the burst is still to be taken in.
func TestUrgentSubmissionIsNotQueuedBehindABurst(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 8*time.Minute)
	// The burst is queued before any orchestrator runs: the whole of it is
	// ahead of the p0 in submission order.
	const burst = 1000
	specs := make([]task.Spec, burst)
	for i := range specs {
		specs[i] = newSpec(fmt.Sprintf("bulk-%d", i), "ok")
		specs[i].Priority = new(5)
	}
	for chunk := range chunks(specs, 1000) {
		if _, err := c.SubmitMany(ctx, chunk); err != nil {
			t.Fatal(err)
		}
	}
	urgent := newSpec("urgent", "ok")
	urgent.Priority = new(0)
	if _, err := c.Submit(ctx, urgent); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	if got, err := c.Wait(ctx, "urgent"); err != nil || got.State != task.Succeeded {
		t.Fatalf("urgent: %v %v", got, err)
	}
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %v %v", s.ID, got, err)
		}
	}
	// Intake order, from the creation events' stream sequences: the p0
	// was taken in among the first, not after the burst queued before it.
	var urgentAt uint64
	var created []uint64
	for _, ev := range testenv.Events(t, c.Conn()) {
		if ev.Event.From != "" || ev.Event.Kind != task.KindTransition {
			continue
		}
		if ev.Event.Task.ID == "urgent" {
			urgentAt = ev.Revision
		} else {
			created = append(created, ev.Revision)
		}
	}
	before := 0
	for _, seq := range created {
		if seq < urgentAt {
			before++
		}
	}
	t.Logf("%d of the %d p5 submissions queued before the p0 were taken in before it", before, burst)
	if before > burst/2 {
		t.Fatalf("the p0 was taken in after %d of %d earlier p5 submissions: intake is first-in first-out", before, burst)
	}
}

// TestWideCascadeGoesInSteps: a task with more dependents than one message
// handles (dependentsStep) releases, or cancels, all of them through its
// cascade timer, a bounded step per message.
func TestWideCascadeGoesInSteps(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	gate := make(chan struct{})
	ex.HandleFunc("gated", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil, nil
	})
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 8*time.Minute)
	const width = 600 // three steps of dependentsStep (256)
	for _, up := range []string{"wide-ok", "wide-cancel"} {
		root := newSpec(up, "gated")
		specs := []task.Spec{root}
		for i := range width {
			specs = append(specs, newSpec(fmt.Sprintf("%s-%03d", up, i), "ok", up))
		}
		for chunk := range chunks(specs, 500) {
			if _, err := c.SubmitGraph(ctx, chunk); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, 4*time.Minute, up+"'s dependents registered", func() bool {
			deps, err := c.Dependents(ctx, up)
			return err == nil && len(deps) == width
		})
	}
	if _, err := c.Cancel(ctx, "wide-cancel", "test"); err != nil {
		t.Fatal(err)
	}
	close(gate)
	for i := range width {
		if got, err := c.Wait(ctx, fmt.Sprintf("wide-ok-%03d", i)); err != nil || got.State != task.Succeeded {
			t.Fatalf("wide-ok-%03d: %v %v", i, got.State, err)
		}
		if got, err := c.Wait(ctx, fmt.Sprintf("wide-cancel-%03d", i)); err != nil || got.State != task.Cancelled {
			t.Fatalf("wide-cancel-%03d: %v %v", i, got.State, err)
		}
	}
}

// TestOversizedReportFailsClearly: a report (forged, or from a broken
// executor) whose inline result is over task.InlineResultLimit fails the
// attempt with a reason instead of growing the record.
func TestOversizedReportFailsClearly(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	release := make(chan struct{})
	ex.HandleFunc("slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	defer close(release)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	if _, err := c.Submit(ctx, newSpec("big-result", "slow")); err != nil {
		t.Fatal(err)
	}
	var running *task.Task
	testenv.Eventually(t, 30*time.Second, "running", func() bool {
		got, err := c.Get(ctx, "big-result")
		running = got
		return err == nil && got.State == task.Running
	})
	big := `"` + strings.Repeat("r", task.InlineResultLimit+10) + `"`
	report := fmt.Sprintf(`{"id":"big-result","type":"slow","execution_id":%q,"attempt":1,"status":"succeeded","result":%s,"executor":"forger","started_at":%q,"finished_at":%q,"token":%q}`,
		running.ExecutionID, big, time.Now().UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano),
		testenv.Token(t, c.Conn(), "big-result", running.ExecutionID))
	publishRaw(t, c.Conn(), subject.Completed("slow"), []byte(report))
	got, err := c.Wait(ctx, "big-result")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != task.Failed || len(got.Result) != 0 || !strings.Contains(got.Reason, "inline result is over") {
		t.Fatalf("big-result: %s %q %d-byte result", got.State, got.Reason, len(got.Result))
	}
}

// TestQueuesAreTrimmed: the queue streams (submissions, reports) are
// trimmed to what is still to be handled, without a delete per
// acknowledgement; and a dispatch nobody takes stays (it is its task's
// record).
func TestQueuesAreTrimmed(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, 3*time.Minute)
	js, _ := jetstream.New(c.Conn())
	for _, name := range []string{subject.StreamSubmit, subject.StreamCompleted} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.Retention; got != jetstream.LimitsPolicy {
			t.Fatalf("%s retention %v, want limits (trimmed by consumer position)", name, got)
		}
	}
	const n = 300
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i] = newSpec(fmt.Sprintf("q-%d", i), "ok")
	}
	stuck := newSpec("q-nobody", "ok")
	stuck.Capability = "nobody"
	specs = append(specs, stuck)
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got, err := c.Wait(ctx, fmt.Sprintf("q-%d", i)); err != nil || got.State != task.Succeeded {
			t.Fatalf("q-%d: %v %v", i, got, err)
		}
	}
	stored := func(name string) map[string]uint64 {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	testenv.Eventually(t, time.Minute, "the queues trimmed to what is left to handle", func() bool {
		return len(stored(subject.StreamSubmit)) == 0 && len(stored(subject.StreamCompleted)) == 0
	})
	got, err := c.Get(ctx, "q-nobody")
	if err != nil || got.State != task.Ready {
		t.Fatalf("q-nobody: %v %v", got, err)
	}
}
