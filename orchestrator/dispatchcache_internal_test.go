package orchestrator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ax-run/ax/task"
)

// TestDispatchCacheIsBoundedByBytes: 100,000 queued tasks with 256 KiB
// payloads would be 25 GiB of records; the cache keeps what fits its budget.
func TestDispatchCacheIsBoundedByBytes(t *testing.T) {
	const budget = 8 << 20
	c := newDispatchCache(budget)
	payload := []byte(`"` + strings.Repeat("x", 256<<10) + `"`)
	for i := range 2000 {
		tk := task.Task{Spec: task.Spec{ID: fmt.Sprintf("big-%d", i), Payload: payload}}
		c.add(&dispatched{task: tk, revision: uint64(i + 1)})
		if b, _ := c.size(); b > budget {
			t.Fatalf("after %d adds the cache holds %d bytes, over its %d", i+1, b, budget)
		}
	}
	for i := range 100_000 {
		c.add(&dispatched{task: task.Task{Spec: task.Spec{ID: fmt.Sprintf("small-%d", i)}}, revision: 1})
	}
	b, n := c.size()
	if b > budget || n > budget/recordOverhead {
		t.Fatalf("cache holds %d bytes in %d entries, budget %d", b, n, budget)
	}
	// Replacing and taking keep the count exact.
	c.add(&dispatched{task: task.Task{Spec: task.Spec{ID: "small-99999"}}, revision: 2})
	d, ok := c.take("small-99999")
	if !ok || d.revision != 2 {
		t.Fatalf("take: %+v %v", d, ok)
	}
	if _, ok := c.take("small-99999"); ok {
		t.Fatal("taken twice")
	}
	b2, n2 := c.size()
	if n2 != n-1 || b2 != b-dispatchSize(&d.task) {
		t.Fatalf("after replace and take: %d bytes %d entries, want %d and %d", b2, n2, b-dispatchSize(&d.task), n-1)
	}
}
