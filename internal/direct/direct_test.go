package direct_test

import (
	"context"
	"encoding/json"
	"sync"
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

// TestBatcherGroupsWhatArrivesWhileInFlight: a message with no batch in
// flight goes at once, alone; those sent while it is in flight go
// together in the next request; each gets its own answer.
func TestBatcherGroupsWhatArrivesWhileInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var sizes []int
	var mu sync.Mutex
	b := answering(t, "task.submit.x", func(m *nats.Msg, batch task.DirectBatch) {
		mu.Lock()
		first := len(sizes) == 0
		sizes = append(sizes, len(batch.Messages))
		mu.Unlock()
		if first {
			<-release // the first batch stays in flight while others arrive
		}
		rep := task.DirectBatchReply{Results: make([]task.DirectReply, len(batch.Messages))}
		for i, msg := range batch.Messages {
			if string(msg) == `"refuse"` {
				rep.Results[i].Error = "refused"
			}
		}
		data, _ := json.Marshal(rep)
		_ = m.Respond(data)
	})
	ctx := testenv.Context(t, time.Minute)
	firstDone := make(chan bool, 1)
	go func() { firstDone <- b.Send(ctx, "task.submit.x", []byte(`"first"`)) }()
	testenv.Eventually(t, 10*time.Second, "the first batch in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sizes) == 1
	})
	var wg sync.WaitGroup
	results := make([]bool, 10)
	for i := range results {
		body := `"ok"`
		if i == 3 {
			body = `"refuse"`
		}
		wg.Go(func() { results[i] = b.Send(ctx, "task.submit.x", []byte(body)) })
	}
	time.Sleep(200 * time.Millisecond) // let them queue behind the first
	close(release)
	wg.Wait()
	if !<-firstDone {
		t.Fatal("the first message was not applied")
	}
	for i, ok := range results {
		if ok == (i == 3) {
			t.Fatalf("message %d applied %v", i, ok)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The first alone; the ten behind it together (a loaded machine may
	// have sent a few before the others queued: fewer requests than
	// messages all the same).
	total := 0
	for _, n := range sizes {
		total += n
	}
	if sizes[0] != 1 || total != 11 || len(sizes) > 4 {
		t.Fatalf("batches %v, want [1 10]: the first alone, the ten that queued behind it together", sizes)
	}
}

// batchResponder answers every batch direct request on subj "applied" for
// each message, counting the messages it got.
func batchResponder(t *testing.T, nc *nats.Conn, subj string, got *atomic.Int32) {
	t.Helper()
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		var b task.DirectBatch
		if err := json.Unmarshal(m.Data, &b); err != nil {
			return
		}
		got.Add(int32(len(b.Messages)))
		data, _ := json.Marshal(task.DirectBatchReply{Results: make([]task.DirectReply, len(b.Messages))})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestSendBatchToGoesToItsOrchestratorFirst: a batch addressed to an
// orchestrator goes to it; addressed to one nobody serves (it stopped), to
// all of them at once; addressed to one that hangs, to all of them after
// the wait, and to all of them without a wait for TargetPause.
func TestSendBatchToGoesToItsOrchestratorFirst(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	nc := testenv.Conn(t, srv.URL())
	s := direct.New(nc, nil)
	ctx := testenv.Context(t, time.Minute)
	const subj = "task.completed.t"
	var shared, here atomic.Int32
	batchResponder(t, nc, subject.DirectBatch(subj), &shared)
	batchResponder(t, nc, subject.DirectTo("here", subject.DirectBatch(subj)), &here)
	bodies := [][]byte{[]byte(`{"id":"a"}`), []byte(`{"id":"b"}`)}
	applied := func(got []bool) bool { return len(got) == 2 && got[0] && got[1] }

	if !applied(s.SendBatchTo(ctx, "here", subj, nil, bodies)) || here.Load() != 2 || shared.Load() != 0 {
		t.Fatalf("addressed: here %d, shared %d", here.Load(), shared.Load())
	}
	if !applied(s.SendBatchTo(ctx, "gone", subj, nil, bodies)) || here.Load() != 2 || shared.Load() != 2 {
		t.Fatalf("addressed to nobody: here %d, shared %d", here.Load(), shared.Load())
	}
	if _, err := nc.Subscribe(subject.DirectTo("hung", subject.DirectBatch(subj)), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if !applied(s.SendBatchTo(ctx, "hung", subj, nil, bodies)) || shared.Load() != 4 {
		t.Fatalf("addressed to a hung one: shared %d", shared.Load())
	}
	// Addressing is off for a while now: even "here" gets nothing.
	if !applied(s.SendBatchTo(ctx, "here", subj, nil, bodies)) || here.Load() != 2 || shared.Load() != 6 {
		t.Fatalf("after a hang: here %d, shared %d", here.Load(), shared.Load())
	}
}

// TestBatcherAddsFlightsUnderBacklog: while a full batch or more waits
// behind the one in flight, more batches go out beside it, never more
// than four at once; every message gets its answer.
func TestBatcherAddsFlightsUnderBacklog(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var inFlight, most, requests atomic.Int64
	// Requests are answered concurrently, as orchestrators' workers do.
	b := answering(t, "task.completed.x", func(m *nats.Msg, batch task.DirectBatch) {
		requests.Add(1)
		n := inFlight.Add(1)
		for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
		}
		go func() {
			<-release
			inFlight.Add(-1)
			data, _ := json.Marshal(task.DirectBatchReply{Results: make([]task.DirectReply, len(batch.Messages))})
			_ = m.Respond(data)
		}()
	})
	ctx := testenv.Context(t, time.Minute)
	n := 4*direct.MaxBatch + 10 // enough for three full batches behind any first one
	var wg sync.WaitGroup
	var applied atomic.Int64
	for range n {
		wg.Go(func() {
			if b.Send(ctx, "task.completed.x", []byte(`"r"`)) {
				applied.Add(1)
			}
		})
	}
	testenv.Eventually(t, 30*time.Second, "four batches in flight", func() bool { return inFlight.Load() == 4 })
	close(release)
	wg.Wait()
	if applied.Load() != int64(n) {
		t.Fatalf("%d of %d messages applied", applied.Load(), n)
	}
	if most.Load() != 4 {
		t.Fatalf("at most %d batches in flight at once, want 4", most.Load())
	}
	if r := requests.Load(); r > int64(n)/direct.MaxBatch+5 {
		t.Fatalf("%d requests for %d messages: the backlog did not go in full batches", r, n)
	}
}

// answering returns a Batcher on a server where batch direct requests for
// subj are answered by answer (the batch decoded; it responds).
func answering(t *testing.T, subj string, answer func(m *nats.Msg, b task.DirectBatch)) *direct.Batcher {
	t.Helper()
	srv := testenv.BareNATS(t)
	nc := testenv.Conn(t, srv.URL())
	sub, err := nc.Subscribe(subject.DirectBatch(subj), func(m *nats.Msg) {
		var b task.DirectBatch
		if err := json.Unmarshal(m.Data, &b); err != nil {
			t.Error(err)
			return
		}
		answer(m, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	_ = nc.Flush()
	b := direct.NewBatcher(direct.New(nc, nil))
	t.Cleanup(b.Close)
	return b
}
