package window

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// base is the start of a 1s window.
var base = time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC)

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want Policy }{
		{Policy{}, Policy{Limit: DefaultLimit, Width: DefaultWidth}},
		{Policy{Limit: -1, Width: -time.Second}, Policy{Limit: 100, Width: time.Second}},
		{Policy{Limit: 5, Width: time.Minute}, Policy{Limit: 5, Width: time.Minute}},
	}
	for _, tc := range tests {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%+v.WithDefaults() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestWindowAndSlotStart(t *testing.T) {
	t.Parallel()
	p := Policy{Limit: 3, Width: time.Second}
	tests := []struct {
		at   time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(0, 999_999_999), 0},
		{time.Unix(1, 0), 1},
		{time.Unix(0, -1), -1},
		{base, base.Unix()},
	}
	for _, tc := range tests {
		if got := p.Window(tc.at); got != tc.want {
			t.Errorf("Window(%s) = %d, want %d", tc.at, got, tc.want)
		}
	}
	// Width 1s, Limit 3: slots at 0, 333,333,333 and 666,666,666 ns.
	for k, want := range []int64{0, 333_333_333, 666_666_666} {
		if got := p.SlotStart(10, k); !got.Equal(time.Unix(10, want)) {
			t.Errorf("SlotStart(10, %d) = %s, want %s", k, got, time.Unix(10, want))
		}
	}
}

func TestAllocateSingle(t *testing.T) {
	t.Parallel()
	p := Policy{Limit: 4, Width: time.Second}
	tests := []struct {
		name    string
		taken   int // slots already taken in the desired window
		desired time.Time
		want    time.Time
	}{
		{"under budget keeps the desired time", 0, base.Add(100 * time.Millisecond), base.Add(100 * time.Millisecond)},
		{"a later slot starts at its spread position", 2, base.Add(100 * time.Millisecond), base.Add(500 * time.Millisecond)},
		{"but never before desired", 2, base.Add(700 * time.Millisecond), base.Add(700 * time.Millisecond)},
		{"a full window moves it to the next", 4, base.Add(700 * time.Millisecond), base.Add(time.Second)},
		{"before the epoch", 0, time.Unix(0, -1), time.Unix(0, -1).UTC()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := NewMemoryCounter()
			for range tc.taken {
				if _, ok, err := c.Take(ctx, "k", p.Window(tc.desired), p.Limit); !ok || err != nil {
					t.Fatal("could not pre-take a slot")
				}
			}
			got, err := p.Allocate(ctx, c, "k", tc.desired, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Errorf("Allocate = %s, want %s (UTC)", got, tc.want)
			}
		})
	}
}

func TestAllocateBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		desired time.Time
	}{
		{"desired at a window start", base},
		{"desired inside a window", base.Add(250 * time.Millisecond)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			p := Policy{} // defaults: 100 per 1s
			c := NewMemoryCounter()
			perWindow := map[int64][]time.Time{}
			for i := range 3000 {
				start, err := p.Allocate(ctx, c, "email.send", tc.desired, 100)
				if err != nil {
					t.Fatalf("retry %d: %v", i, err)
				}
				if start.Before(tc.desired) {
					t.Fatalf("retry %d starts at %s, before desired %s", i, start, tc.desired)
				}
				w := p.Window(start)
				perWindow[w] = append(perWindow[w], start)
			}
			first := p.Window(tc.desired)
			if len(perWindow) != 30 {
				t.Errorf("%d windows used, want 30", len(perWindow))
			}
			for w := first; w < first+30; w++ {
				starts := perWindow[w]
				if len(starts) != 100 {
					t.Errorf("window %d: %d retries, want 100", w-first, len(starts))
				}
				if n := c.Taken("email.send", w); n != 100 {
					t.Errorf("window %d: counter holds %d, want 100", w-first, n)
				}
				slices.SortFunc(starts, time.Time.Compare)
				winStart := time.Unix(0, w*int64(time.Second))
				for k, s := range starts {
					// Evenly spread: slot k at k·10ms, unless that is before desired.
					want := winStart.Add(time.Duration(k) * 10 * time.Millisecond)
					if want.Before(tc.desired) {
						want = tc.desired
					}
					if !s.Equal(want) {
						t.Fatalf("window %d slot %d starts at %s, want %s", w-first, k, s, want)
					}
					if k > 0 && s.After(tc.desired) && s.Sub(starts[k-1]) > 10*time.Millisecond {
						t.Fatalf("window %d: gap %s between slots %d and %d", w-first, s.Sub(starts[k-1]), k-1, k)
					}
				}
			}
		})
	}
}

func TestAllocateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := Policy{Limit: 10, Width: 100 * time.Millisecond}
	c := NewMemoryCounter()
	const goroutines, each = 40, 25
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		starts []time.Time
	)
	for g := range goroutines {
		wg.Go(func() {
			key := "a"
			if g%4 == 0 {
				key = "b" // another key has its own budget
			}
			for range each {
				s, err := p.Allocate(ctx, c, key, base, 1000)
				if err != nil {
					t.Error(err)
					return
				}
				if key == "a" {
					mu.Lock()
					starts = append(starts, s)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	perWindow := map[int64]int{}
	seen := map[time.Time]bool{}
	for _, s := range starts {
		perWindow[p.Window(s)]++
		if seen[s] {
			t.Errorf("two retries start at %s", s)
		}
		seen[s] = true
	}
	wantA := goroutines * each * 3 / 4
	if len(starts) != wantA || len(perWindow) != wantA/p.Limit {
		t.Errorf("%d starts over %d windows, want %d over %d", len(starts), len(perWindow), wantA, wantA/p.Limit)
	}
	for w, n := range perWindow {
		if n > p.Limit {
			t.Errorf("window %d: %d retries, limit %d", w, n, p.Limit)
		}
	}
	first := p.Window(base)
	for w := first; w < first+int64(wantA/p.Limit); w++ {
		if perWindow[w] != p.Limit || c.Taken("a", w) != p.Limit {
			t.Errorf("window %d: %d retries, counter %d; want %d (windows filled in order)", w-first, perWindow[w], c.Taken("a", w), p.Limit)
		}
	}
	if n := c.Taken("b", first); n != p.Limit {
		t.Errorf("key b, first window: %d taken, want %d", n, p.Limit)
	}
}

// fakeCounter fails with err on window failAt and reports every other window
// as full.
type fakeCounter struct {
	err    error
	failAt int64
	calls  []int64
}

func (f *fakeCounter) Take(_ context.Context, _ string, w int64, _ int) (int, bool, error) {
	f.calls = append(f.calls, w)
	if w == f.failAt {
		return 0, false, f.err
	}
	return 0, false, nil
}

func TestAllocateErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("kv: compare-and-set conflict budget exceeded")
	p := Policy{Limit: 2, Width: time.Second}
	first := p.Window(base)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name       string
		ctx        context.Context
		c          Counter
		maxWindows int
		is         error
		msg        string
		calls      int // Take calls, -1 to skip the check
	}{
		{"counter error is wrapped", context.Background(), &fakeCounter{err: boom, failAt: first + 2}, 10, boom,
			fmt.Sprintf(`window: take a slot of window %d for "k": kv: compare-and-set conflict budget exceeded`, first+2), 3},
		{"exhausted after maxWindows", context.Background(), &fakeCounter{failAt: -1}, 5, ErrExhausted,
			`window: retry budget exhausted for "k": all 5 windows of 1s from 2026-05-05T12:00:00Z to 2026-05-05T12:00:05Z hold 2 retries`, 5},
		{"maxWindows below 1 tries one window", context.Background(), &fakeCounter{failAt: -1}, 0, ErrExhausted,
			`window: retry budget exhausted for "k": all 1 windows of 1s…`, 1},
		{"cancelled context", cancelled, &fakeCounter{failAt: -1}, 5, context.Canceled,
			`window: allocate retry of "k": context canceled`, 0},
		{"bad slot from the counter", context.Background(), badSlot{}, 5, nil,
			`window: counter gave slot 7 of window…`, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := p.Allocate(tc.ctx, tc.c, "k", base.Add(400*time.Millisecond), tc.maxWindows)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			want, prefix := strings.CutSuffix(tc.msg, "…")
			if prefix && !strings.HasPrefix(err.Error(), want) || !prefix && err.Error() != want {
				t.Errorf("error\n got %s\nwant %s", err, tc.msg)
			}
			if f, ok := tc.c.(*fakeCounter); ok && tc.calls >= 0 && len(f.calls) != tc.calls {
				t.Errorf("%d Take calls, want %d", len(f.calls), tc.calls)
			}
		})
	}
}

type badSlot struct{}

func (badSlot) Take(context.Context, string, int64, int) (int, bool, error) { return 7, true, nil }

func TestAllocateOutOfRange(t *testing.T) {
	t.Parallel()
	p := Policy{}
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := p.Allocate(context.Background(), NewMemoryCounter(), "k", far, 1); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Allocate in 2300: %v, want an out-of-range error", err)
	}
}

func TestMemoryCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := NewMemoryCounter()
	for want := range 3 {
		slot, ok, err := c.Take(ctx, "k", 7, 3)
		if slot != want || !ok || err != nil {
			t.Fatalf("Take = %d, %v, %v; want %d, true, nil", slot, ok, err, want)
		}
	}
	if _, ok, err := c.Take(ctx, "k", 7, 3); ok || err != nil {
		t.Errorf("Take on a full window = %v, %v; want false, nil", ok, err)
	}
	if slot, ok, _ := c.Take(ctx, "k", 8, 3); slot != 0 || !ok {
		t.Errorf("next window: slot %d, %v; want 0, true", slot, ok)
	}
	if _, _, err := c.Take(ctx, "k", 9, 0); err == nil {
		t.Error("limit 0 accepted")
	}
	c.Prune(8)
	if c.Taken("k", 7) != 0 || c.Taken("k", 8) != 1 {
		t.Errorf("after Prune(8): window 7 holds %d, window 8 %d; want 0, 1", c.Taken("k", 7), c.Taken("k", 8))
	}
}

// TestAllocateForIsIdempotent: allocating again for the same holder (a
// retry whose allocation is redone after a conflict or a crash) returns the
// same start and takes no second slot.
func TestAllocateForIsIdempotent(t *testing.T) {
	p := Policy{Limit: 2, Width: time.Second}
	c := NewMemoryCounter()
	ctx := context.Background()
	at := time.Unix(1_000_000, 0)
	a1, err := p.AllocateFor(ctx, c, "k", "task-a#1", at, 10)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := p.AllocateFor(ctx, c, "k", "task-a#1", at, 10)
	if err != nil || !a2.Equal(a1) {
		t.Fatalf("again: %s %v, want %s", a2, err, a1)
	}
	if n := c.Taken("k", p.Window(at)); n != 1 {
		t.Fatalf("%d slots taken, want 1", n)
	}
	b, _ := p.AllocateFor(ctx, c, "k", "task-b#1", at, 10)
	cc, _ := p.AllocateFor(ctx, c, "k", "task-c#1", at, 10) // the window is full: the next one
	if p.Window(b) != p.Window(at) || p.Window(cc) != p.Window(at)+1 {
		t.Fatalf("b %s c %s", b, cc)
	}
	// a's window is full now; a's allocation is still found there.
	if a3, err := p.AllocateFor(ctx, c, "k", "task-a#1", at, 10); err != nil || !a3.Equal(a1) {
		t.Fatalf("after the window filled: %s %v, want %s", a3, err, a1)
	}
}
