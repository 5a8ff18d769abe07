package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestDispatchCopyEnsuresTheOutcomeEffects: an attempt's outcome is
// written, its effects are lost (here: its dead letter removed, as when the
// orchestrator could not store it and the executor died before storing its
// report and acknowledging its dispatch), and the dispatch is delivered
// again. The redelivery is then the effects' last trigger: the executor
// asks the orchestrator to claim it, which ensures them (the dead letter is
// back) and answers "ended"; nothing runs again.
func TestDispatchCopyEnsuresTheOutcomeEffects(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	var runs int
	runsCh := make(chan struct{}, 16)
	ex.HandleFunc("doomed", func(context.Context, *executor.Job) (any, error) {
		runsCh <- struct{}{}
		return nil, executor.Permanent(errors.New("no"))
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	s := newSpec("doomed-1", "doomed")
	s.MaxRetries = new(0)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "doomed-1"); err != nil || got.State != task.Failed {
		t.Fatalf("doomed-1: %+v %v", got, err)
	}
	h, err := c.History(ctx, "doomed-1")
	if err != nil {
		t.Fatal(err)
	}
	var dispatch store.Revisioned
	for _, ev := range h {
		if ev.Event.To == task.Ready {
			dispatch = ev
		}
	}
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	dlq, err := js.Stream(ctx, subject.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	deadLetter := func() bool {
		_, err := dlq.GetLastMsgForSubject(ctx, subject.DLQ("doomed-1"))
		return err == nil
	}
	testenv.Eventually(t, 30*time.Second, "the dead letter", deadLetter)
	if err := dlq.Purge(ctx, jetstream.WithPurgeSubject(subject.DLQ("doomed-1"))); err != nil {
		t.Fatal(err)
	}
	if deadLetter() {
		t.Fatal("the dead letter is still there")
	}

	// The dispatch delivered again: its executor's claim.
	exec := dispatch.Event.Task.ExecutionID
	data, _ := json.Marshal(task.ClaimRequest{ID: "doomed-1", ExecutionID: exec, Revision: dispatch.Revision,
		Executor: "again", StartedAt: time.Now(), Delivered: 2, Token: testenv.Token(t, nc, "doomed-1", exec)})
	msg, err := nc.RequestWithContext(ctx, subject.Claim("default"), data)
	if err != nil {
		t.Fatal(err)
	}
	var rep task.ClaimReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil || rep.Status != task.ClaimEnded {
		t.Fatalf("claim of the ended execution: %s %v", msg.Data, err)
	}
	if !deadLetter() {
		t.Fatal("the claim of the ended execution did not ensure its dead letter")
	}
	close(runsCh)
	for range runsCh {
		runs++
	}
	if runs != 1 {
		t.Fatalf("the handler ran %d times; want once", runs)
	}
	if got, err := c.Get(ctx, "doomed-1"); err != nil || got.State != task.Failed {
		t.Fatalf("doomed-1 after the claim: %+v %v", got, err)
	}
}
