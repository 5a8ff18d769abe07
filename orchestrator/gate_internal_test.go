package orchestrator

import (
	"fmt"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/breaker"
)

// TestIdleBreakersAreForgotten: the gate keeps a breaker per task type only
// while it has outcomes in its window or is not closed, so types chosen by
// submitters do not grow its memory for ever.
func TestIdleBreakersAreForgotten(t *testing.T) {
	cfg := breaker.Config{Window: 10 * time.Second, MinVolume: 2, Threshold: 0.5, Cooldown: time.Minute}
	g := newGate(cfg)
	now := time.Unix(1_700_000_000, 0)
	for i := range 1000 {
		g.breaker(fmt.Sprint("type-", i)).Record(now, true)
	}
	// One type opens; it must be kept however idle.
	b := g.breaker("bad")
	b.Record(now, false)
	b.Record(now, false)
	if st, _ := b.State(now); st != breaker.Open {
		t.Fatalf("bad is %s", st)
	}
	g.shared["bad"] = breaker.Open
	g.revs["breaker.type-7"] = 42 // a shared closed breaker: its key is returned for deletion

	if keys := g.evictIdle(now.Add(time.Second)); len(keys) != 0 || g.breakerCount() != 1001 {
		t.Fatalf("evicted within the window: %d left, keys %v", g.breakerCount(), keys)
	}
	keys := g.evictIdle(now.Add(cfg.Window + time.Second))
	if g.breakerCount() != 1 || g.breakers["bad"] == nil {
		t.Fatalf("%d breakers left after the window, want only the open one", g.breakerCount())
	}
	if len(keys) != 1 || keys["breaker.type-7"] != 42 {
		t.Fatalf("keys to delete %v", keys)
	}
	// A forgotten type starts again closed, as a new one.
	if ok, why := g.check(now.Add(cfg.Window+2*time.Second), "type-3", false); !ok {
		t.Fatalf("type-3 held: %s", why)
	}
}
