package orchestrator

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestInTurn: every index is handed out once, to at most workers
// goroutines at a time.
func TestInTurn(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{0, 4}, {1, 4}, {3, 8}, {100, 7}} {
		var mu sync.Mutex
		seen := make(map[int]int)
		var running, most atomic.Int32
		inTurn(c.n, c.workers, func(i int) {
			now := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			mu.Lock()
			seen[i]++
			mu.Unlock()
		})
		if len(seen) != c.n {
			t.Errorf("n=%d: %d indexes handed out", c.n, len(seen))
		}
		for i, k := range seen {
			if i < 0 || i >= c.n || k != 1 {
				t.Errorf("n=%d: index %d handed out %d times", c.n, i, k)
			}
		}
		if int(most.Load()) > c.workers {
			t.Errorf("n=%d: %d at once, want at most %d", c.n, most.Load(), c.workers)
		}
	}
}
