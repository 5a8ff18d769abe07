package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// stored is how many messages were ever stored on a stream.
func stored(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.LastSeq
}

func storedReports(t *testing.T, js jetstream.JetStream) uint64 {
	return stored(t, js, subject.StreamCompleted)
}

// With an orchestrator running, submissions (Submit, a small SubmitMany,
// SubmitGraph) and reports go to it directly: each is applied before it is
// answered, and none is stored on AX_SUBMIT or AX_COMPLETED.
func TestDirectRequests(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	js, _ := jetstream.New(c.Conn())
	ctx := testenv.Context(t, time.Minute)
	const n = 50
	for i := range n - 10 {
		if _, err := c.Submit(ctx, newSpec(fmt.Sprint("direct-", i), "ok")); err != nil {
			t.Fatal(err)
		}
	}
	var many []task.Spec
	for i := n - 10; i < n-2; i++ {
		many = append(many, newSpec(fmt.Sprint("direct-", i), "ok"))
	}
	if _, err := c.SubmitMany(ctx, many); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{newSpec(fmt.Sprint("direct-", n-2), "ok"),
		newSpec(fmt.Sprint("direct-", n-1), "ok", fmt.Sprint("direct-", n-2))}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got, err := c.Wait(ctx, fmt.Sprint("direct-", i)); err != nil || got.State != task.Succeeded {
			t.Fatalf("direct-%d: %+v %v", i, got, err)
		}
	}
	for _, st := range []string{subject.StreamSubmit, subject.StreamCompleted} {
		if got := stored(t, js, st); got != 0 {
			t.Fatalf("%d messages stored on %s; want none (all applied directly)", got, st)
		}
	}
	// A direct submission without an id is not taken (stored, it gets an
	// id that is the same on every redelivery).
	m, err := c.Conn().Request(subject.Direct(subject.Submit("ok")), []byte(`{"type":"ok"}`), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), "needs an id") {
		t.Fatalf("id-less direct submission answered %s", m.Data)
	}
}

// heldExecutor returns an executor (not started) whose "held" handler
// closes started at its first run, waits for release to be closed and
// returns result; runs counts its runs.
func heldExecutor(t *testing.T, url, result string) (ex *executor.Executor, started, release chan struct{}, runs *atomic.Int32) {
	started, release, runs = make(chan struct{}), make(chan struct{}), new(atomic.Int32)
	ex = testenv.Executor(t, url, executor.Config{})
	ex.HandleFunc("held", func(context.Context, *executor.Job) (any, error) {
		if runs.Add(1) == 1 {
			close(started)
		}
		<-release
		return result, nil
	})
	return ex, started, release, runs
}

// When no orchestrator answers a direct report, the executor stores it on
// task.completed.<type>, and it is applied once an orchestrator runs: the
// task neither runs again nor stays ready.
func TestReportStoredWhenNoOrchestratorAnswers(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	o, err := orchestrator.New(testenv.Conn(t, srv.URL()), orchestrator.Config{Logger: testenv.SlogLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ex, started, release, runs := heldExecutor(t, srv.URL(), "done while no orchestrator ran")
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	js, _ := jetstream.New(c.Conn())
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := c.Submit(ctx, newSpec("orphan-report", "held")); err != nil {
		t.Fatal(err)
	}
	<-started
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = o.Stop(stopCtx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	testenv.Eventually(t, time.Minute, "the report stored", func() bool { return storedReports(t, js) == 1 })
	// A submission meanwhile is stored too, and created later.
	if _, err := c.Submit(ctx, newSpec("while-down", "ok")); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, js, subject.StreamSubmit); got != 1 {
		t.Fatalf("%d submissions stored; want 1 (the first one, taken directly, is not)", got)
	}
	if got, err := c.Get(ctx, "orphan-report"); err != nil || got.State.Terminal() {
		t.Fatalf("before an orchestrator runs again: %+v %v; want not ended yet", got, err)
	}
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	got, err := c.Wait(ctx, "orphan-report")
	if err != nil || got.State != task.Succeeded || string(got.Result) != `"done while no orchestrator ran"` {
		t.Fatalf("orphan-report: %+v %v; want succeeded with the stored report's result", got, err)
	}
	if got, err := c.Wait(ctx, "while-down"); err != nil || got.State != task.Succeeded {
		t.Fatalf("while-down: %+v %v", got, err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times; want once", n)
	}
}

// A report that had to be stored (its orchestrator could not write the
// task) is also sent directly again by its executor, and applied once the
// task can be written, while the orchestrators' consumer of stored reports
// delivers nothing (paused here; in a cluster, without a leader).
func TestStoredReportResentDirectly(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex, started, release, runs := heldExecutor(t, srv.URL(), "resent")
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	js, _ := jetstream.New(c.Conn())
	ctx := testenv.Context(t, 2*time.Minute)
	if _, err := c.Submit(ctx, newSpec("resent-report", "held")); err != nil {
		t.Fatal(err)
	}
	<-started

	// AX_TASKS refuses writes: the direct report is not applied, and stored.
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	orig := tasks.CachedInfo().Config
	full := orig
	full.MaxBytes, full.Discard = int64(tasks.CachedInfo().State.Bytes), jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	if _, err := js.PauseConsumer(ctx, subject.StreamCompleted, subject.ConsumerCompleted, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	close(release)
	testenv.Eventually(t, time.Minute, "the report stored", func() bool { return storedReports(t, js) == 1 })
	if _, err := js.UpdateStream(ctx, orig); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "resent-report")
	if err != nil || got.State != task.Succeeded || string(got.Result) != `"resent"` {
		t.Fatalf("resent-report: %+v %v; want succeeded with its report's result", got, err)
	}
	cons, err := js.Consumer(ctx, subject.StreamCompleted, subject.ConsumerCompleted)
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); !info.Paused || info.Delivered.Consumer != 0 {
		t.Fatalf("the stored reports' consumer delivered %d (paused %v): the report was not applied by its resend",
			info.Delivered.Consumer, info.Paused)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times; want once", n)
	}
}

// Hostile direct requests get an answer and change nothing: garbage
// bodies, a subject that stands for no stored subject, a graph that is not
// one. A malformed submission is rejected (recorded, as from the stream);
// the orchestrator keeps working.
func TestDirectRequestsHostile(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	nc := c.Conn()
	ask := func(subj, body string) task.DirectReply {
		t.Helper()
		m, err := nc.Request(subj, []byte(body), 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		var rep task.DirectReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("%s answered %q: %v", subj, m.Data, err)
		}
		return rep
	}
	for _, tc := range []struct {
		subj, body string
		applied    bool
	}{
		{subject.Direct("ax.task.victim"), `{"id":"victim"}`, false},                    // not a direct subject
		{subject.Direct(subject.Submit("ok")), `not json`, true},                        // rejected, recorded
		{subject.Direct(subject.Submit("ok")), `{"id":"bad-prio","priority":99}`, true}, // rejected, recorded
		{subject.Direct(subject.GraphSubmit), `{"tasks":"nope"}`, true},                 // rejected graph
		{subject.Direct(subject.Completed("ok")), `{"garbage":`, true},                  // dropped report
	} {
		if rep := ask(tc.subj, tc.body); (rep.Error == "") != tc.applied {
			t.Errorf("%s %s: answered %+v; want applied=%v", tc.subj, tc.body, rep, tc.applied)
		}
	}
	ctx := testenv.Context(t, time.Minute)
	var rej *sdk.RejectedError
	if _, err := c.Get(ctx, "bad-prio"); !errors.As(err, &rej) {
		t.Fatalf("bad-prio: %v; want a recorded rejection", err)
	}
	if _, err := c.Submit(ctx, newSpec("after-hostile", "ok")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "after-hostile"); err != nil || got.State != task.Succeeded {
		t.Fatalf("after-hostile: %+v %v", got, err)
	}
}
