package orchestrator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestDispatchCopyEnsuresTheOutcomeEffects: an attempt's outcome is
// written, its effects are lost (here: its dead letter removed, as when the
// orchestrator could not store it and the executor died before storing its
// report), and a copy of its dispatch is delivered again. The copy is then
// the effects' last trigger: the executor asks the orchestrator, which
// ensures them (the dead letter is back) and answers "ended"; nothing runs
// again.
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

	// Keep a copy of the dispatch as it is published.
	spy := testenv.Conn(t, srv.URL())
	copies := make(chan *nats.Msg, 4)
	sub, err := spy.Subscribe(subject.ReadyAll, func(m *nats.Msg) { copies <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	s := newSpec("doomed-1", "doomed")
	s.MaxRetries = new(0)
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "doomed-1"); err != nil || got.State != task.Failed {
		t.Fatalf("doomed-1: %+v %v", got, err)
	}
	dispatch := <-copies

	js, _ := jetstream.New(spy)
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

	// The dispatch again, as an undelivered copy would come.
	copyMsg := nats.NewMsg(dispatch.Subject)
	copyMsg.Data = dispatch.Data
	copyMsg.Header = dispatch.Header
	copyMsg.Header.Del(jetstream.MsgIDHeader)
	if _, err := js.PublishMsg(ctx, copyMsg); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the dead letter ensured again", deadLetter)
	ready, err := js.Stream(ctx, subject.StreamReady)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the copy acknowledged", func() bool {
		cons, err := ready.Consumer(ctx, subject.ReadyConsumer("default", s.PriorityLevel()))
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	close(runsCh)
	for range runsCh {
		runs++
	}
	if runs != 1 {
		t.Fatalf("the handler ran %d times; want once", runs)
	}
	if got, err := c.Get(ctx, "doomed-1"); err != nil || got.State != task.Failed {
		t.Fatalf("doomed-1 after the copy: %+v %v", got, err)
	}
}
