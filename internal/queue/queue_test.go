package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/testenv"
)

func setup(t *testing.T, retention jetstream.RetentionPolicy) (context.Context, jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	srv := testenv.BareNATS(t)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"}, Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"q.a", "q.b", "q.c"} {
		for i := range 10 {
			if _, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ctx, js, st
}

// consume creates a consumer on filter and acknowledges the first n of
// the fetched messages (and, when skip, also the one after a gap).
func consume(t *testing.T, ctx context.Context, st jetstream.Stream, name, filter string, fetch int, ack func(i int) bool) {
	t.Helper()
	cfg := jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Hour}
	if filter != "" {
		cfg.FilterSubject = filter
	}
	c, err := st.CreateConsumer(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fetch == 0 {
		return
	}
	batch, err := c.Fetch(fetch, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for m := range batch.Messages() {
		if ack(i) {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		i++
	}
	if i != fetch {
		t.Fatalf("%s fetched %d, want %d", name, i, fetch)
	}
}

// AX's own durables (subject.IsQueueDurable): only their progress lets a
// trim go ahead.
const (
	durA = "ax-ready-a-p0"
	durB = "ax-ready-b-p0"
	durC = "ax-ready-c-p0"
)

func stored(t *testing.T, ctx context.Context, st jetstream.Stream) map[string]uint64 {
	t.Helper()
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

func TestTrimRemovesWhatEveryReaderAcknowledged(t *testing.T) {
	ctx, js, st := setup(t, jetstream.LimitsPolicy)
	// a: 6 acknowledged in order. b: 8 delivered, the 3rd left unacknowledged
	// (the floor stops below it). c: nobody reads it.
	consume(t, ctx, st, durA, "q.a", 6, func(int) bool { return true })
	consume(t, ctx, st, durB, "q.b", 8, func(i int) bool { return i != 2 })

	depth, err := queue.Depth(ctx, js, "Q")
	if err != nil {
		t.Fatal(err)
	}
	// a: 4 undelivered; b: 2 undelivered + 1 unacknowledged; c: 10 unread.
	if depth != 4+3+10 {
		t.Fatalf("depth %d, want 17", depth)
	}
	done := queue.Trimmed{}
	if err := queue.Trim(ctx, js, "Q", done); err != nil {
		t.Fatal(err)
	}
	got := stored(t, ctx, st)
	if got["q.a"] != 4 || got["q.b"] != 8 || got["q.c"] != 10 {
		t.Fatalf("stored after trim: %v, want q.a 4 (6 acknowledged), q.b 8 (2 below the unacknowledged one), q.c 10 (unread)", got)
	}
	if depth2, err := queue.Depth(ctx, js, "Q"); err != nil || depth2 != depth {
		t.Fatalf("depth after trim %d (%v), want %d: trimming removes only handled messages", depth2, err, depth)
	}
	// A second trim with nothing new acknowledged purges nothing.
	if err := queue.Trim(ctx, js, "Q", done); err != nil {
		t.Fatal(err)
	}
	if got2 := stored(t, ctx, st); got2["q.a"] != 4 || got2["q.b"] != 8 {
		t.Fatalf("stored after a second trim: %v", got2)
	}
}

func TestTrimWaitsForEveryOverlappingReader(t *testing.T) {
	ctx, js, st := setup(t, jetstream.LimitsPolicy)
	consume(t, ctx, st, durA, "q.a", 10, func(int) bool { return true })
	// A second reader of everything that has read nothing holds q.a back.
	consume(t, ctx, st, "ALL", "q.*", 0, nil)
	if err := queue.Trim(ctx, js, "Q", queue.Trimmed{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, st); got["q.a"] != 10 {
		t.Fatalf("q.a trimmed to %d while a reader of q.* had not read it", got["q.a"])
	}
	if err := st.DeleteConsumer(ctx, "ALL"); err != nil {
		t.Fatal(err)
	}
	if err := queue.Trim(ctx, js, "Q", queue.Trimmed{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, st); got["q.a"] != 0 || got["q.b"] != 10 {
		t.Fatalf("stored after the second reader left: %v, want q.a 0 and q.b untouched", got)
	}
}

func TestTrimLeavesWorkQueueStreams(t *testing.T) {
	ctx, js, st := setup(t, jetstream.WorkQueuePolicy)
	consume(t, ctx, st, durA, "q.a", 5, func(int) bool { return true })
	if err := queue.Trim(ctx, js, "Q", queue.Trimmed{}); err != nil {
		t.Fatal(err)
	}
	got := stored(t, ctx, st)
	if got["q.a"] != 5 || got["q.b"] != 10 {
		t.Fatalf("stored: %v, want q.a 5 (the work queue deleted what was acknowledged), q.b 10", got)
	}
	depth, err := queue.Depth(ctx, js, "Q")
	if err != nil || depth != 5+10+10 {
		t.Fatalf("depth %d (%v), want 25", depth, err)
	}
}

func TestPendingWithoutConsumerCountsStored(t *testing.T) {
	ctx, _, st := setup(t, jetstream.LimitsPolicy)
	n, err := queue.Pending(ctx, st, "nobody", "q.c")
	if err != nil || n != 10 {
		t.Fatalf("pending %d (%v), want 10 stored", n, err)
	}
	consume(t, ctx, st, durC, "q.c", 3, func(int) bool { return true })
	if n, err = queue.Pending(ctx, st, durC, "q.c"); err != nil || n != 7 {
		t.Fatalf("pending %d (%v), want 7", n, err)
	}
}

// TestTrimIgnoresForeignReadersAlone: a consumer that is not one of AX's
// durables (an operator's viewer created with DeliverNew, or AckNone) says
// nothing about what AX handled. Read alone by such consumers, a subject
// keeps every message; beside AX's durable it can only hold the trim back.
func TestTrimIgnoresForeignReadersAlone(t *testing.T) {
	ctx, js, st := setup(t, jetstream.LimitsPolicy)
	for _, cfg := range []jetstream.ConsumerConfig{
		{Durable: "viewer-new", FilterSubject: "q.a", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy},
		{Durable: "viewer-none", FilterSubject: "q.b", AckPolicy: jetstream.AckNonePolicy},
	} {
		c, err := st.CreateConsumer(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AckPolicy == jetstream.AckNonePolicy {
			batch, err := c.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for range batch.Messages() {
			}
		}
	}
	if err := queue.Trim(ctx, js, "Q", queue.Trimmed{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, st); got["q.a"] != 10 || got["q.b"] != 10 {
		t.Fatalf("stored after a trim with only foreign readers: %v, want q.a and q.b untouched (10 each)", got)
	}
	// AX's durable on q.a acknowledges 6; the DeliverNew viewer's floor is
	// past them all, so AX's floor decides.
	consume(t, ctx, st, durA, "q.a", 6, func(int) bool { return true })
	if err := queue.Trim(ctx, js, "Q", queue.Trimmed{}); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, ctx, st); got["q.a"] != 4 || got["q.b"] != 10 {
		t.Fatalf("stored after AX acknowledged 6 of q.a: %v, want q.a 4, q.b 10", got)
	}
}
