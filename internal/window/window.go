// Package window allocates start times to retries so that at most Limit
// retries of one key (a task type) start in any window of Width.
//
// Windows are aligned to the Unix epoch: window w covers
// [w·Width, (w+1)·Width) in Unix time. A retry wanted at desired gets a slot in
// the window containing desired if that window has room, else in the next
// window with room — it is moved, never dropped. Slots are spread evenly
// inside a window: the k-th slot (0-based) of window w starts at
// max(desired, start(w) + k·Width/Limit).
//
// The count of slots taken per window lives behind the Counter interface, so
// that orchestrators can share it (on JetStream KV with compare-and-set); the
// allocation itself is pure and reads no clock.
package window

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Defaults for Policy.
const (
	DefaultLimit = 100
	DefaultWidth = time.Second
)

// ErrExhausted is returned, wrapped, by Allocate when every window it may try
// is full.
var ErrExhausted = errors.New("retry budget exhausted")

// Policy limits how many retries of one key may start per window.
type Policy struct {
	// Limit is the most retries that may start in one window. Default 100.
	Limit int
	// Width is the length of a window. Default 1s.
	Width time.Duration
}

// WithDefaults returns p with zero or negative fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.Limit <= 0 {
		p.Limit = DefaultLimit
	}
	if p.Width <= 0 {
		p.Width = DefaultWidth
	}
	return p
}

// Counter is the shared, durable count of slots taken per window
// (implemented elsewhere on JetStream KV with compare-and-set). Take
// atomically takes the next slot of window w if fewer than limit are taken
// and returns its 0-based index; ok is false when the window is full.
type Counter interface {
	Take(ctx context.Context, key string, w int64, limit int) (slot int, ok bool, err error)
}

// Window returns the index of the window containing t: floor(unixnano/width)
// with p's defaults applied.
func (p Policy) Window(t time.Time) int64 {
	p = p.WithDefaults()
	return floorDiv(t.UnixNano(), int64(p.Width))
}

// SlotStart returns the start of the k-th slot (0-based) of window w, before
// the max with the desired time: start(w) + k·Width/Limit, with p's defaults
// applied.
func (p Policy) SlotStart(w int64, k int) time.Time {
	p = p.WithDefaults()
	width, limit := int64(p.Width), int64(p.Limit)
	// k·width/limit without overflowing k·width.
	off := width/limit*int64(k) + width%limit*int64(k)/limit
	return time.Unix(0, w*width+off).UTC()
}

// Allocate returns the start time for a retry of key wanted at desired,
// taking a slot through c in the window containing desired or, when that is
// full, in the first of the following windows with room. It tries at most
// maxWindows windows (maxWindows < 1 counts as 1); when all are full it
// returns an error wrapping ErrExhausted that says how far ahead the budget
// is exhausted. Errors from c are wrapped and returned, as is ctx's error
// before each Take.
//
// The start time is in UTC and never earlier than desired. desired must lie
// within the years 1678–2262 (the range of int64 Unix nanoseconds).
func (p Policy) Allocate(ctx context.Context, c Counter, key string, desired time.Time, maxWindows int) (time.Time, error) {
	return p.AllocateFor(ctx, c, key, "", desired, maxWindows)
}

// HolderCounter is a Counter that can take slots idempotently: TakeFor with
// a holder that already holds a slot of window w returns that slot again
// instead of taking another (a retry whose allocation is redone after a
// crash or a conflict).
type HolderCounter interface {
	Counter
	TakeFor(ctx context.Context, key string, w int64, limit int, holder string) (slot int, ok bool, err error)
}

// AllocateFor is Allocate for one holder (say, a task's attempt): with a
// HolderCounter, allocating again for the same holder and desired time
// returns the same start and takes no second slot.
func (p Policy) AllocateFor(ctx context.Context, c Counter, key, holder string, desired time.Time, maxWindows int) (time.Time, error) {
	take := c.Take
	if hc, ok := c.(HolderCounter); ok && holder != "" {
		take = func(ctx context.Context, key string, w int64, limit int) (int, bool, error) {
			return hc.TakeFor(ctx, key, w, limit, holder)
		}
	}
	p = p.WithDefaults()
	maxWindows = max(maxWindows, 1)
	first := p.Window(desired)
	// The windows tried, and the end of the last, must have int64 Unix
	// nanoseconds.
	lastOK := math.MaxInt64/int64(p.Width) - 1
	if desired.Before(time.Unix(0, math.MinInt64)) || desired.After(time.Unix(0, math.MaxInt64)) ||
		int64(maxWindows) > lastOK-first {
		return time.Time{}, fmt.Errorf("window: allocate retry of %q: desired time %s (plus %d windows of %s) out of range", key, desired, maxWindows, p.Width)
	}
	for i := range int64(maxWindows) {
		if err := ctx.Err(); err != nil {
			return time.Time{}, fmt.Errorf("window: allocate retry of %q: %w", key, err)
		}
		w := first + i
		slot, ok, err := take(ctx, key, w, p.Limit)
		if err != nil {
			return time.Time{}, fmt.Errorf("window: take a slot of window %d for %q: %w", w, key, err)
		}
		if !ok {
			continue
		}
		if slot < 0 || slot >= p.Limit {
			return time.Time{}, fmt.Errorf("window: counter gave slot %d of window %d for %q, want 0–%d", slot, w, key, p.Limit-1)
		}
		start := p.SlotStart(w, slot)
		if start.Before(desired) {
			start = desired.UTC()
		}
		return start, nil
	}
	end := p.SlotStart(first+int64(maxWindows), 0)
	return time.Time{}, fmt.Errorf("window: %w for %q: all %d windows of %s from %s to %s hold %d retries",
		ErrExhausted, key, maxWindows, p.Width, p.SlotStart(first, 0).Format(time.RFC3339Nano), end.Format(time.RFC3339Nano), p.Limit)
}

// floorDiv returns a/b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// MemoryCounter is an in-memory Counter for tests and single-process use.
// Safe for concurrent use. Its memory grows with the windows used; Prune
// forgets old ones.
type MemoryCounter struct {
	mu      sync.Mutex
	taken   map[memoryKey]int
	holders map[memoryKey]map[string]int
}

type memoryKey struct {
	key string
	w   int64
}

// NewMemoryCounter returns an empty MemoryCounter.
func NewMemoryCounter() *MemoryCounter {
	return &MemoryCounter{taken: make(map[memoryKey]int), holders: make(map[memoryKey]map[string]int)}
}

// TakeFor is Take, idempotent per holder.
func (m *MemoryCounter) TakeFor(ctx context.Context, key string, w int64, limit int, holder string) (int, bool, error) {
	m.mu.Lock()
	slot, held := m.holders[memoryKey{key, w}][holder]
	m.mu.Unlock()
	if held {
		return slot, true, nil
	}
	slot, ok, err := m.Take(ctx, key, w, limit)
	if ok {
		m.mu.Lock()
		k := memoryKey{key, w}
		if m.holders[k] == nil {
			m.holders[k] = make(map[string]int)
		}
		m.holders[k][holder] = slot
		m.mu.Unlock()
	}
	return slot, ok, err
}

// Take takes the next slot of key's window w if fewer than limit are taken.
func (m *MemoryCounter) Take(ctx context.Context, key string, w int64, limit int) (int, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	if limit < 1 {
		return 0, false, fmt.Errorf("window: limit %d, want at least 1", limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memoryKey{key, w}
	n := m.taken[k]
	if n >= limit {
		return 0, false, nil
	}
	m.taken[k] = n + 1
	return n, true, nil
}

// Taken returns the number of slots taken in key's window w.
func (m *MemoryCounter) Taken(key string, w int64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.taken[memoryKey{key, w}]
}

// Prune forgets the counts of all windows before window before, of every key.
func (m *MemoryCounter) Prune(before int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.taken {
		if k.w < before {
			delete(m.taken, k)
			delete(m.holders, k)
		}
	}
}
