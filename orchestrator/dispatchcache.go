package orchestrator

import (
	"sync"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/ax-run/ax/task"
)

// dispatchCache remembers recent dispatches so a report can be applied
// without reading the task back (see claimedFromCache). It is bounded by
// the bytes of the records it holds, not by their number: a backlog of large
// payloads for a capability nobody serves must not grow the orchestrator.
// Losing an entry costs one task read.
type dispatchCache struct {
	mu       sync.Mutex
	lru      *lru.LRU[string, *dispatched]
	bytes    int64
	maxBytes int64
}

// dispatched is a task as it was dispatched, at its revision. The cache
// holds pointers: a record is about 800 bytes, and passing it by value
// through the LRU's generic calls grew the stacks of the goroutines that
// add (7 % of a group-commit bench's CPU in runtime.copystack).
type dispatched struct {
	task     task.Task
	revision uint64
}

// recordOverhead approximates a record's fixed cost in memory.
const recordOverhead = 1024

func dispatchSize(t *task.Task) int64 {
	n := recordOverhead + len(t.Payload) + len(t.Result) + len(t.Reason)
	for _, e := range t.Errors {
		n += len(e.Error) + 128
	}
	for _, d := range t.DependsOn {
		n += len(d) + 16
	}
	for _, d := range t.Dependents {
		n += len(d) + 16
	}
	return int64(n)
}

func newDispatchCache(maxBytes int64) *dispatchCache {
	c := &dispatchCache{maxBytes: maxBytes}
	// The entry count is bounded by the bytes; the LRU's own bound only
	// has to be above what fits.
	c.lru, _ = lru.NewLRU[string, *dispatched](int(maxBytes/recordOverhead)+1, func(_ string, d *dispatched) {
		c.bytes -= dispatchSize(&d.task)
	})
	return c
}

// add remembers a dispatch; a record larger than 1/16 of the budget is not
// kept.
func (c *dispatchCache) add(d *dispatched) {
	size := dispatchSize(&d.task)
	if size > c.maxBytes/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.lru.Peek(d.task.ID); ok {
		c.bytes -= dispatchSize(&old.task) // replacing does not call the eviction callback
	}
	c.lru.Add(d.task.ID, d)
	c.bytes += size
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}

// take returns and forgets the dispatch of id.
func (c *dispatchCache) take(id string) (*dispatched, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.lru.Peek(id)
	if ok {
		c.lru.Remove(id)
	}
	return d, ok
}

// size returns the bytes and entries held.
func (c *dispatchCache) size() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes, c.lru.Len()
}
