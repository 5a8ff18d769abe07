package direct_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/direct"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

func msg(subj string) *nats.Msg { return &nats.Msg{Subject: subj, Data: []byte(`{}`)} }

// answer makes a responder on the direct twin of subj that answers reply.
func answer(t *testing.T, nc *nats.Conn, subj string, reply task.DirectReply) {
	t.Helper()
	data, _ := json.Marshal(reply)
	if _, err := nc.Subscribe(subject.Direct(subj), func(m *nats.Msg) { _ = m.Respond(data) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestSend(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	nc := testenv.Conn(t, srv.URL())
	var pauses atomic.Int32
	s := direct.New(nc, func(string, error) { pauses.Add(1) })
	ctx := testenv.Context(t, time.Minute)

	// No orchestrator: not applied, at once, and no pause.
	if ok, why := s.Send(ctx, msg("task.submit.none")); ok || why == "" {
		t.Fatalf("no responders: %v %q", ok, why)
	}
	answer(t, nc, "task.submit.ok", task.DirectReply{})
	answer(t, nc, "task.submit.refused", task.DirectReply{Error: "orchestrator busy: store it"})
	if ok, why := s.Send(ctx, msg("task.submit.ok")); !ok {
		t.Fatalf("applied: %q", why)
	}
	if ok, why := s.Send(ctx, msg("task.submit.refused")); ok || why != "orchestrator busy: store it" {
		t.Fatalf("busy: %v %q", ok, why)
	}
	if pauses.Load() != 0 {
		t.Fatal("paused on an answer")
	}

	// A caller whose context ends gives the request half of its time, and
	// pauses nothing: its own deadline, not the orchestrators, cut it.
	silent, err := nc.Subscribe(subject.Direct("task.submit.silent"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	ok, _ := s.Send(short, msg("task.submit.silent"))
	cancel()
	if ok || pauses.Load() != 0 {
		t.Fatalf("silent, caller's deadline: applied %v, pauses %d", ok, pauses.Load())
	}

	// No answer within Timeout: a pause, reported once, during which
	// nothing is sent (even to an orchestrator that would answer).
	if ok, _ := s.Send(ctx, msg("task.submit.silent")); ok {
		t.Fatal("silent: applied")
	}
	_ = silent.Unsubscribe()
	if pauses.Load() != 1 {
		t.Fatalf("%d pauses; want 1", pauses.Load())
	}
	if ok, why := s.Send(ctx, msg("task.submit.ok")); ok || why != "direct requests paused" {
		t.Fatalf("during the pause: %v %q", ok, why)
	}
	if pauses.Load() != 1 {
		t.Fatalf("%d pauses; want 1", pauses.Load())
	}
}
