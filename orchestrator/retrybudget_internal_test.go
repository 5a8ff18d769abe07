package orchestrator

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/window"
)

// TestRetrySlotsTakenOncePerRetry: a retry's allocation redone — after a
// conflict (same process) or a crash (a new process with no memory) — finds
// its slot again in the shared bucket instead of taking a second one.
func TestRetrySlotsTakenOncePerRetry(t *testing.T) {
	t.Parallel()
	nc := internalConn(t)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subject.BucketRetryWindows)
	if err != nil {
		t.Fatal(err)
	}
	counter := func() *kvWindowCounter {
		return &kvWindowCounter{kv: kv, full: map[string]int64{}, mine: map[string]int64{}}
	}
	p := window.Policy{Limit: 2, Width: time.Second}
	at := time.Now().Add(time.Hour)
	first := counter()
	a1, err := p.AllocateFor(ctx, first, "t", "a#1", at, 10)
	if err != nil {
		t.Fatal(err)
	}
	if a2, err := p.AllocateFor(ctx, first, "t", "a#1", at, 10); err != nil || !a2.Equal(a1) { // a conflict, redone
		t.Fatalf("redo after a conflict: %s %v, want %s", a2, err, a1)
	}
	if _, err := p.AllocateFor(ctx, first, "t", "b#1", at, 10); err != nil {
		t.Fatal(err)
	}
	// The window is full now, and the first process knows it.
	restarted := counter()
	if a3, err := p.AllocateFor(ctx, restarted, "t", "a#1", at, 10); err != nil || !a3.Equal(a1) { // a crash, redone
		t.Fatalf("redo after a crash: %s %v, want %s", a3, err, a1)
	}
	if a4, err := p.AllocateFor(ctx, first, "t", "a#1", at, 10); err != nil || !a4.Equal(a1) {
		t.Fatalf("redo in a process that saw the window full: %s %v, want %s", a4, err, a1)
	}
	c, err := p.AllocateFor(ctx, restarted, "t", "c#1", at, 10)
	if err != nil || p.Window(c) != p.Window(at)+1 {
		t.Fatalf("a third retry: %s %v, want the next window", c, err)
	}
	e, err := kv.Get(ctx, "t.w"+itoa(p.Window(at)))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := parseSlots(e.Value()); err != nil || s.N != 2 || len(s.Holders) != 2 {
		t.Fatalf("window holds %s (%v), want 2 slots by a#1 and b#1", e.Value(), err)
	}
}

// internalConn starts an embedded server (random port, temporary store)
// and returns a connection to it; both end with the test.
func internalConn(t *testing.T) *nats.Conn {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
