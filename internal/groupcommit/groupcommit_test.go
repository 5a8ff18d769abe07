package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/natsserver"
)

// stream starts a server that syncs every write and a stream S on s.>
// allowing atomic publishes.
func stream(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), SyncAlways: true})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Stop)
	return streamOn(t, srv.URL(), 1)
}

// streamOn creates the stream S with replicas on the server(s) at url.
func streamOn(t *testing.T, url string, replicas int) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowAtomicPublish: true, Replicas: replicas}
	st, err := js.CreateStream(ctx, cfg)
	// A cluster that just elected its meta leader may not know its peers
	// online yet ("no suitable peers for placement"): wait for them.
	for err != nil && ctx.Err() == nil && strings.Contains(err.Error(), "no suitable peers") {
		time.Sleep(100 * time.Millisecond)
		st, err = js.CreateStream(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	// A replicated stream just created may still elect its leader, or
	// change it once its replicas catch up (writes then got no response,
	// or their answers were lost): start once it has a leader, every
	// replica is current, and a write is answered.
	for replicas > 1 {
		info, err := st.Info(ctx)
		ready := err == nil && info.Cluster != nil && info.Cluster.Leader != "" && len(info.Cluster.Replicas) == replicas-1
		for i := 0; ready && i < len(info.Cluster.Replicas); i++ {
			ready = info.Cluster.Replicas[i].Current
		}
		if ready {
			if _, err := js.Publish(ctx, "s.ready", nil); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s not ready: %v", cfg.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return js, st
}

// stats counts what a Committer reports through Options.Committed.
type stats struct {
	mu                                sync.Mutex
	writes, batches, batched, retried int
}

func (s *stats) committed(n int, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes += n
	switch how {
	case HowBatch:
		s.batches++
		s.batched += n
	case HowRefused:
		s.retried += n
	}
}

func (s *stats) get() stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return stats{writes: s.writes, batches: s.batches, batched: s.batched, retried: s.retried}
}

func casMsg(subject, data string, expected uint64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
	return m
}

// Concurrent writers, single writes and batches mixed (one group in flight,
// batches from two writes): every acknowledgement names the sequence that
// holds that very write, and chained compare-and-set writes on each
// subject all succeed.
func TestAcknowledgedSequencesHoldTheirWrites(t *testing.T) {
	js, st := stream(t)
	acknowledgedSequences(t, js, st)
}

// The same on a 3-node cluster with an R3 stream, where a batch is one
// replication proposal applied by every replica.
func TestAcknowledgedSequencesHoldTheirWritesR3(t *testing.T) {
	c, err := natsserver.StartCluster(3, natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	js, st := streamOn(t, c.URL(), 3)
	acknowledgedSequences(t, js, st)
}

func acknowledgedSequences(t *testing.T, js jetstream.JetStream, st jetstream.Stream) {
	var counts stats
	c := New(js, Options{MinBatch: 2, InFlight: 1, Committed: counts.committed})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const writers, each = 48, 20
	type acked struct {
		subject, data string
		seq           uint64
	}
	var (
		mu   sync.Mutex
		all  []acked
		lost int // writes stored although their answer was lost
		wg   sync.WaitGroup
		errs = make(chan error, writers)
	)
	for w := range writers {
		wg.Go(func() {
			subject := fmt.Sprintf("s.%d", w)
			var rev uint64
			for i := range each {
				data := fmt.Sprintf("%d/%d", w, i)
				ack, err := c.Publish(ctx, casMsg(subject, data, rev))
				var apiErr *jetstream.APIError
				if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
					// A batch whose answer was lost (an R3 leader slow or
					// changing under load) was stored, and its writes
					// published again on their own failed their
					// compare-and-set: a writer re-reads, as AX's do. Only
					// this writer writes its subject, so the write that
					// moved it on is this one: a read that does not show
					// it (a new leader still applying, a read that timed
					// out) is read again, for a while.
					for try := 0; try < 50 && ctx.Err() == nil; try++ {
						if m, gerr := st.GetLastMsgForSubject(ctx, subject); gerr == nil && string(m.Data) == data {
							ack, err = &jetstream.PubAck{Sequence: m.Sequence}, nil
							mu.Lock()
							lost++
							mu.Unlock()
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d write %d: %w", w, i, err)
					return
				}
				rev = ack.Sequence
				mu.Lock()
				all = append(all, acked{subject, data, ack.Sequence})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for _, a := range all {
		m, err := st.GetMsg(ctx, a.seq)
		if err != nil {
			t.Fatalf("get %d: %v", a.seq, err)
		}
		if m.Subject != a.subject || string(m.Data) != a.data {
			t.Fatalf("sequence %d holds %s %q, acknowledged for %s %q", a.seq, m.Subject, m.Data, a.subject, a.data)
		}
	}
	s := counts.get()
	if s.writes != writers*each {
		t.Fatalf("committed %d writes, want %d", s.writes, writers*each)
	}
	if s.batches == 0 || s.batched < 2*s.batches {
		t.Fatalf("48 concurrent writers with one group in flight formed no batch: %d writes in %d batches", s.batched, s.batches)
	}
	if s.retried != 0 && lost == 0 {
		t.Fatalf("%d writes retried on their own although no batch could be refused and no answer was lost", s.retried)
	}
	t.Logf("%d writes, %d in %d batches, %d retried on their own, %d stored with their answer lost", s.writes, s.batched,
		s.batches, s.retried, lost)
}

// A batch holding one stale compare-and-set is refused whole; each write is
// then published on its own: the stale one fails its compare-and-set, the
// others are written.
func TestRefusedBatchWritesEachOnItsOwn(t *testing.T) {
	js, st := stream(t)
	var counts stats
	c := New(js, Options{MinBatch: 2, Committed: counts.committed})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ack, err := js.Publish(ctx, "s.taken", []byte("first"))
	if err != nil {
		t.Fatal(err)
	}
	group := []*write{
		{msg: casMsg("s.a", "a", 0), done: make(chan struct{})},
		{msg: casMsg("s.taken", "stale", ack.Sequence+100), done: make(chan struct{})},
		{msg: casMsg("s.b", "b", 0), done: make(chan struct{})},
	}
	c.commit(group)
	for _, w := range group {
		<-w.done
	}
	if group[0].err != nil || group[2].err != nil {
		t.Fatalf("fresh writes failed: %v, %v", group[0].err, group[2].err)
	}
	var apiErr *jetstream.APIError
	if !errors.As(group[1].err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("stale write: %v, want a wrong-last-sequence refusal", group[1].err)
	}
	for _, w := range []*write{group[0], group[2]} {
		m, err := st.GetMsg(ctx, w.ack.Sequence)
		if err != nil || m.Subject != w.msg.Subject {
			t.Fatalf("write %s acknowledged at %d: %v %v", w.msg.Subject, w.ack.Sequence, m, err)
		}
		if m.Header.Get("Nats-Batch-Id") != "" {
			t.Fatalf("write %s published again carries its refused batch's headers", w.msg.Subject)
		}
	}
	if s := counts.get(); s.retried != 3 || s.batches != 0 {
		t.Fatalf("%d writes retried in %d batches: want the 3 writes retried, no batch", s.retried, s.batches)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 {
		t.Fatalf("stream holds %d messages, want 3 (nothing of the refused batch)", info.State.Msgs)
	}
}

// Close answers writes still queued with ErrClosed and refuses new ones.
func TestClose(t *testing.T) {
	js, _ := stream(t)
	c := New(js, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Publish(ctx, casMsg("s.x", "x", 0)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if _, err := c.Publish(ctx, casMsg("s.y", "y", 0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
}

// PublishBatches stores nothing for fewer messages than a batch pays for,
// stores a larger set in batches of at most DefaultMaxBatch, and reports a
// refused batch (here: one holding a duplicate message id) as not stored
// while the others are.
func TestPublishBatches(t *testing.T) {
	js, st := stream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs := func(prefix string, n int) []*nats.Msg {
		out := make([]*nats.Msg, n)
		for i := range out {
			out[i] = nats.NewMsg(fmt.Sprintf("s.%s.%d", prefix, i))
			out[i].Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", prefix, i))
		}
		return out
	}
	for i, ok := range PublishBatches(ctx, js.Conn(), msgs("few", DefaultMinBatch-1)) {
		if ok {
			t.Fatalf("message %d of fewer than DefaultMinBatch reported stored", i)
		}
	}
	if _, err := js.Publish(ctx, "s.dup.300", nil, jetstream.WithMsgID("dup-300")); err != nil {
		t.Fatal(err)
	}
	const n = 2*DefaultMaxBatch + 100
	stored := PublishBatches(ctx, js.Conn(), msgs("dup", n))
	for i, ok := range stored {
		if want := i < DefaultMaxBatch || i >= 2*DefaultMaxBatch; ok != want {
			t.Fatalf("message %d reported stored %v, want %v (only the second batch holds the duplicate)", i, ok, want)
		}
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(1 + n - DefaultMaxBatch); info.State.Msgs != want {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, want)
	}
}

// TestOneCompareAndSetPerSubjectsInABatch: two writes expecting the same
// revision of the same subjects — here a wildcard over one task's
// subjects, written on two of them — never both land. The server checks
// each write of an atomic batch against the stream before the batch, and
// does not see that the batch wrote under a wildcard already: batched
// together, both were stored (a task's outcome applied twice). The second
// goes in a later group and fails its compare-and-set.
func TestOneCompareAndSetPerSubjectsInABatch(t *testing.T) {
	js, st := stream(t)
	c := New(js, Options{MinBatch: 2})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ack, err := js.Publish(ctx, "s.t.d", []byte("dispatch"))
	if err != nil {
		t.Fatal(err)
	}
	twice := func(body string) *nats.Msg {
		m := casMsg("s.t.e", body, ack.Sequence)
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", "s.t.>")
		return m
	}
	for round := range 20 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		// Others around them, so the two queue up in one burst.
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = c.Publish(ctx, casMsg(fmt.Sprintf("s.o%d-%d", round, i), "o", 0))
			}()
		}
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = c.Publish(ctx, twice(fmt.Sprint("outcome-", i)))
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: two writes expecting revision %d of s.t.>: %v, %v; want exactly one stored", round, ack.Sequence, errs[0], errs[1])
		}
		// Back to the dispatch as the last message of s.t.> for the next round.
		m, err := st.GetLastMsgForSubject(ctx, "s.t.e")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatal(err)
		}
	}
}
