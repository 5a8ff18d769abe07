package typeset_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/typeset"
)

func newSet(t *testing.T, ctx context.Context, url string, limit int, node string) *typeset.Set {
	t.Helper()
	js, err := jetstream.New(testenv.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	s, err := typeset.New(ctx, js, limit, node, time.Now)
	if err != nil {
		t.Fatalf("new set: %v", err)
	}
	return s
}

// recorded returns the types in AX_TYPES, in stream order.
func recorded(t *testing.T, ctx context.Context, url string) []string {
	t.Helper()
	js, _ := jetstream.New(testenv.Conn(t, url))
	st, err := js.Stream(ctx, subject.StreamTypes)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := uint64(1); ; {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject.TaskTypeAll))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		typ, _ := subject.TaskTypeFrom(msg.Subject)
		out = append(out, typ)
		seq = msg.Sequence + 1
	}
}

// TestAdmitUpToTheLimit: types are accepted until the limit, known ones
// always; the set holds across a restart (a new Set reads it back).
func TestAdmitUpToTheLimit(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, 30*time.Second)
	s := newSet(t, ctx, srv.URL(), 2, "o1")
	for _, typ := range []string{"a", "b", "a", "b.c", "b"} {
		err := s.Admit(ctx, typ)
		switch typ {
		case "b.c":
			if !errors.Is(err, typeset.ErrLimit) {
				t.Fatalf("admit %s over the limit: %v", typ, err)
			}
		default:
			if err != nil {
				t.Fatalf("admit %s: %v", typ, err)
			}
		}
	}
	if got := recorded(t, ctx, srv.URL()); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("recorded %v", got)
	}
	if u, fit := s.Unknown([]string{"a", "b"}); len(u) != 0 || !fit {
		t.Fatalf("Unknown of known types: %v %v", u, fit)
	}
	if u, fit := s.Unknown([]string{"a", "c", "c"}); fmt.Sprint(u) != "[c]" || fit {
		t.Fatalf("Unknown of a new type on a full set: %v %v", u, fit)
	}

	// A restarted orchestrator, with the same limit: same answers, and
	// nothing written.
	again := newSet(t, ctx, srv.URL(), 2, "o1")
	if again.Len() != 2 || !again.Known("a") || !again.Known("b") {
		t.Fatalf("after a restart: %d types", again.Len())
	}
	if err := again.Admit(ctx, "c"); !errors.Is(err, typeset.ErrLimit) {
		t.Fatalf("admit c after a restart: %v", err)
	}
	// A raised limit accepts more; a lowered one keeps the first ones.
	raised := newSet(t, ctx, srv.URL(), 3, "o2")
	if _, fit := raised.Unknown([]string{"a", "c"}); !fit {
		t.Fatal("one new type must fit in one free slot")
	}
	if u, fit := raised.Unknown([]string{"c", "d"}); fit || len(u) != 2 {
		t.Fatalf("two new types in one free slot: %v %v", u, fit)
	}
	if err := raised.Admit(ctx, "c"); err != nil {
		t.Fatalf("admit c under a raised limit: %v", err)
	}
	lowered := newSet(t, ctx, srv.URL(), 1, "o3")
	if !lowered.Known("a") || lowered.Known("b") || lowered.Known("c") {
		t.Fatal("a lowered limit must keep the first type only")
	}
	if err := lowered.Admit(ctx, "b"); !errors.Is(err, typeset.ErrLimit) {
		t.Fatalf("admit b under a lowered limit: %v", err)
	}
	if got := recorded(t, ctx, srv.URL()); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("recorded %v", got)
	}
}

// TestConcurrentWritersNeverExceedTheLimit: two sets on their own
// connections (two orchestrators) admit overlapping new types from many
// goroutines: exactly limit types are recorded, both accept exactly
// those, and each type is recorded once.
func TestConcurrentWritersNeverExceedTheLimit(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, 60*time.Second)
	const limit, types = 7, 40
	sets := []*typeset.Set{newSet(t, ctx, srv.URL(), limit, "o1"), newSet(t, ctx, srv.URL(), limit, "o2")}
	var mu sync.Mutex
	accepted := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		s := sets[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range types {
				typ := fmt.Sprintf("t%d", (i*(w+3))%types) // each worker its own order
				err := s.Admit(ctx, typ)
				switch {
				case err == nil:
					mu.Lock()
					accepted[typ] = true
					mu.Unlock()
				case !errors.Is(err, typeset.ErrLimit):
					t.Errorf("admit %s: %v", typ, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := recorded(t, ctx, srv.URL())
	if len(got) != limit {
		t.Fatalf("recorded %d types, limit %d: %v", len(got), limit, got)
	}
	seen := map[string]bool{}
	for _, typ := range got {
		if seen[typ] {
			t.Fatalf("type %s recorded twice: %v", typ, got)
		}
		seen[typ] = true
		if !accepted[typ] {
			t.Errorf("type %s recorded but never accepted", typ)
		}
	}
	if len(accepted) != limit {
		t.Fatalf("accepted %d types, limit %d", len(accepted), limit)
	}
	// Both sets now accept exactly the recorded types (the one that lost
	// a race reads the winner's record on its next new type).
	for i, s := range sets {
		for _, typ := range got {
			if err := s.Admit(ctx, typ); err != nil {
				t.Errorf("set %d: admit recorded %s: %v", i, typ, err)
			}
		}
		if err := s.Admit(ctx, "never"); !errors.Is(err, typeset.ErrLimit) {
			t.Errorf("set %d: admit a new type: %v", i, err)
		}
	}
}

// TestKnownTypesCostNoRequest: once a type is known, Admit does not touch
// JetStream (it works with the server gone).
func TestKnownTypesCostNoRequest(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, 30*time.Second)
	s := newSet(t, ctx, srv.URL(), 1, "o1")
	if err := s.Admit(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for range 1000 {
		if err := s.Admit(ctx, "a"); err != nil {
			t.Fatalf("known type with the server down: %v", err)
		}
		if err := s.Admit(ctx, "b"); !errors.Is(err, typeset.ErrLimit) {
			t.Fatalf("new type on a full set with the server down: %v", err)
		}
	}
}
