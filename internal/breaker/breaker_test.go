package breaker

import (
	"encoding/json"
	"sync"
	"testing"
	"time"
)

// t0 is a whole second, so one-second buckets start at it.
var t0 = time.Date(2026, 5, 5, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

type outcome struct {
	at      time.Duration // after t0
	success bool
}

// fails returns n failures at offset d.
func fails(n int, d time.Duration) []outcome { return repeat(n, d, false) }

// oks returns n successes at offset d.
func oks(n int, d time.Duration) []outcome { return repeat(n, d, true) }

func repeat(n int, d time.Duration, success bool) []outcome {
	out := make([]outcome, n)
	for i := range out {
		out[i] = outcome{d, success}
	}
	return out
}

func join(parts ...[]outcome) []outcome {
	var out []outcome
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// openAt returns a default breaker opened by 20 failures at offset d.
func openAt(t *testing.T, d time.Duration) *Breaker {
	t.Helper()
	b := New(Config{})
	for range 19 {
		if s, changed := b.Record(at(d), false); s != Closed || changed {
			t.Fatalf("Record = %s, %v before MinVolume", s, changed)
		}
	}
	if s, changed := b.Record(at(d), false); s != Open || !changed {
		t.Fatalf("20th failure: Record = %s, %v; want open, true", s, changed)
	}
	return b
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	def := Config{Window: time.Minute, Threshold: 0.5, MinVolume: 20, Cooldown: 30 * time.Second, Probes: 3, ProbeTimeout: time.Minute}
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero", Config{}, def},
		{"negative", Config{Window: -1, Threshold: -0.1, MinVolume: -5, Cooldown: -1, Probes: -1, ProbeTimeout: -1}, def},
		{"kept", Config{Window: time.Hour, Threshold: 0.9, MinVolume: 5, Cooldown: time.Minute, Probes: 1, ProbeTimeout: time.Hour},
			Config{Window: time.Hour, Threshold: 0.9, MinVolume: 5, Cooldown: time.Minute, Probes: 1, ProbeTimeout: time.Hour}},
	}
	for _, tc := range tests {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%s: WithDefaults() = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := New(Config{}).Config(); got != def {
		t.Errorf("New(Config{}).Config() = %+v, want %+v", got, def)
	}
}

func TestOpening(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		outcomes []outcome
		want     State
		volume   int
	}{
		{"below MinVolume at 100% failures", Config{}, fails(19, 0), Closed, 19},
		{"MinVolume reached at 100% failures", Config{}, fails(20, 0), Open, 20},
		{"ratio equal to threshold stays closed", Config{}, join(oks(10, 0), fails(10, time.Second)), Closed, 20},
		{"ratio above threshold opens", Config{}, join(oks(10, 0), fails(11, time.Second)), Open, 21},
		{"mostly successes", Config{}, join(fails(5, 0), oks(100, time.Second)), Closed, 105},
		{"custom threshold and volume", Config{Threshold: 0.2, MinVolume: 5}, join(oks(4, 0), fails(1, 0)), Closed, 5},
		{"custom threshold exceeded", Config{Threshold: 0.2, MinVolume: 5}, join(oks(4, 0), fails(2, 0)), Open, 6},
		{"threshold 1 never opens", Config{Threshold: 1}, fails(100, 0), Closed, 100},
		{"failures spread over the window count", Config{}, join(fails(10, 0), fails(10, 59*time.Second)), Open, 20},
		{"old failures slide out", Config{}, join(fails(19, 0), fails(1, 60*time.Second)), Closed, 1},
		{"failures slide out of a 10s window", Config{Window: 10 * time.Second}, join(fails(19, 0), fails(1, 10*time.Second)), Closed, 1},
		{"and stay in just before", Config{Window: 10 * time.Second}, join(fails(19, 0), fails(1, 9999*time.Millisecond)), Open, 20},
		{"outcomes from long ago are dropped", Config{}, join(fails(10, time.Hour), fails(10, 0)), Closed, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.cfg)
			var last time.Duration
			for _, o := range tc.outcomes {
				b.Record(at(o.at), o.success)
				last = max(last, o.at)
			}
			snap := b.Snapshot(at(last))
			if snap.State != tc.want || snap.Volume != tc.volume {
				t.Errorf("state %s, volume %d; want %s, %d", snap.State, snap.Volume, tc.want, tc.volume)
			}
		})
	}
}

func TestOpenSince(t *testing.T) {
	t.Parallel()
	b := openAt(t, 5*time.Second)
	snap := b.Snapshot(at(5 * time.Second))
	want := Snapshot{State: Open, Since: at(5 * time.Second), FailureRatio: 1, Volume: 20}
	if snap != want {
		t.Errorf("Snapshot = %+v, want %+v", snap, want)
	}
	// Outcomes of tasks dispatched before it opened are ignored.
	for range 50 {
		if s, changed := b.Record(at(6*time.Second), true); s != Open || changed {
			t.Fatalf("Record while open = %s, %v", s, changed)
		}
	}
	if v := b.Snapshot(at(6 * time.Second)).Volume; v != 20 {
		t.Errorf("volume %d after outcomes while open, want 20", v)
	}
}

func TestCooldown(t *testing.T) {
	t.Parallel()
	b := openAt(t, 0)
	tests := []struct {
		at      time.Duration
		want    State
		changed bool
	}{
		{0, Open, false},
		{30*time.Second - time.Nanosecond, Open, false},
		{30 * time.Second, HalfOpen, true},
		{31 * time.Second, HalfOpen, false},
	}
	for _, tc := range tests {
		if s, changed := b.State(at(tc.at)); s != tc.want || changed != tc.changed {
			t.Errorf("State(+%s) = %s, %v; want %s, %v", tc.at, s, changed, tc.want, tc.changed)
		}
	}
	// Half-open counts from the end of the cooldown, whenever it is noticed.
	late := openAt(t, 0)
	if s, _ := late.State(at(time.Hour)); s != HalfOpen {
		t.Fatalf("state an hour later: %s", s)
	}
	if since := late.Snapshot(at(time.Hour)).Since; !since.Equal(at(30 * time.Second)) {
		t.Errorf("half-open since %s, want %s", since, at(30*time.Second))
	}
}

func TestAllow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		open  bool
		at    time.Duration
		calls int
		want  int // trues among calls
	}{
		{"closed lets everything through", Config{}, false, 0, 100, 100},
		{"open lets nothing through", Config{}, true, 29 * time.Second, 100, 0},
		{"half-open hands out exactly Probes", Config{}, true, 30 * time.Second, 100, 3},
		{"custom Probes", Config{Probes: 7}, true, 45 * time.Second, 100, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.cfg)
			if tc.open {
				for range 20 {
					b.Record(at(0), false)
				}
			}
			got := 0
			for range tc.calls {
				if b.Allow(at(tc.at)) {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("%d of %d allowed, want %d", got, tc.calls, tc.want)
			}
		})
	}
}

func TestHalfOpen(t *testing.T) {
	t.Parallel()
	half := 30 * time.Second

	t.Run("a probe failure re-opens and restarts the cooldown", func(t *testing.T) {
		t.Parallel()
		b := openAt(t, 0)
		if !b.Allow(at(half)) {
			t.Fatal("no probe in half-open")
		}
		b.Record(at(half+time.Second), true)
		if s, changed := b.Record(at(half+2*time.Second), false); s != Open || !changed {
			t.Fatalf("probe failure: Record = %s, %v; want open, true", s, changed)
		}
		reopened := half + 2*time.Second
		if s, _ := b.State(at(reopened + 30*time.Second - time.Nanosecond)); s != Open {
			t.Errorf("state just before the new cooldown ends: %s, want open", s)
		}
		if b.Allow(at(reopened + 29*time.Second)) {
			t.Error("allowed while re-opened")
		}
		if s, changed := b.State(at(reopened + 30*time.Second)); s != HalfOpen || !changed {
			t.Errorf("state after the new cooldown: %s, %v; want half_open, true", s, changed)
		}
		// A fresh set of probes, and earlier successes no longer count.
		n := 0
		for b.Allow(at(reopened + 30*time.Second)) {
			n++
		}
		if n != 3 {
			t.Errorf("%d probes after re-opening, want 3", n)
		}
		b.Record(at(reopened+31*time.Second), true)
		if s, _ := b.Record(at(reopened+31*time.Second), true); s != HalfOpen {
			t.Errorf("closed after 2 of 3 probe successes")
		}
	})

	t.Run("a failure when the cooldown has passed re-opens without a half-open call", func(t *testing.T) {
		t.Parallel()
		b := openAt(t, 0)
		if s, changed := b.Record(at(time.Minute), false); s != Open || !changed {
			t.Fatalf("Record = %s, %v; want open, true", s, changed)
		}
		if since := b.Snapshot(at(time.Minute)).Since; !since.Equal(at(time.Minute)) {
			t.Errorf("since %s, want %s", since, at(time.Minute))
		}
	})

	t.Run("Probes successes close and reset the window", func(t *testing.T) {
		t.Parallel()
		b := openAt(t, 0)
		for i := range 3 {
			if !b.Allow(at(half)) {
				t.Fatalf("probe %d refused", i)
			}
		}
		for i, want := range []State{HalfOpen, HalfOpen, Closed} {
			s, changed := b.Record(at(half+time.Duration(i+1)*time.Second), true)
			if s != want || changed != (want == Closed) {
				t.Fatalf("success %d: Record = %s, %v; want %s", i+1, s, changed, want)
			}
		}
		closedAt := half + 3*time.Second
		snap := b.Snapshot(at(closedAt))
		want := Snapshot{State: Closed, Since: at(closedAt)}
		if snap != want {
			t.Errorf("Snapshot after closing = %+v, want %+v", snap, want)
		}
		// The failures that opened it are gone: it needs MinVolume anew.
		for range 19 {
			b.Record(at(closedAt), false)
		}
		if s, _ := b.State(at(closedAt)); s != Closed {
			t.Errorf("re-opened after 19 failures following a close")
		}
		if !b.Allow(at(closedAt)) {
			t.Error("closed breaker refused a task")
		}
	})
}

func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	half := 30 * time.Second
	tests := []struct {
		name  string
		build func(t *testing.T) *Breaker
		now   time.Duration
	}{
		{"closed", func(*testing.T) *Breaker { return New(Config{}) }, 0},
		{"open", func(t *testing.T) *Breaker { return openAt(t, 0) }, time.Second},
		{"half-open with probes out and a success", func(t *testing.T) *Breaker {
			b := openAt(t, 0)
			b.Allow(at(half))
			b.Allow(at(half))
			b.Record(at(half), true)
			return b
		}, half},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orig := tc.build(t)
			snap := orig.Snapshot(at(tc.now))
			data, err := json.Marshal(snap)
			if err != nil {
				t.Fatal(err)
			}
			var back Snapshot
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			other := New(Config{})
			other.Restore(back)
			got := other.Snapshot(at(tc.now))
			// The window is not shared: only the state fields carry over.
			got.FailureRatio, got.Volume = snap.FailureRatio, snap.Volume
			if got != snap {
				t.Errorf("restored %+v, want %+v (json %s)", got, snap, data)
			}
			// Both breakers now make the same decisions.
			for _, d := range []time.Duration{tc.now, tc.now + half, tc.now + time.Hour} {
				a, b := orig.Allow(at(d)), other.Allow(at(d))
				if a != b {
					t.Errorf("at +%s: original allows %v, restored %v", d, a, b)
				}
			}
		})
	}
}

func TestSnapshotJSON(t *testing.T) {
	t.Parallel()
	data, err := json.Marshal(Snapshot{State: HalfOpen, Since: t0, ProbesLeft: 2, ProbeSuccesses: 1, FailureRatio: 0.25, Volume: 8})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"state":"half_open","since":"2026-05-05T12:00:00Z","probes_left":2,"probe_successes":1,"failure_ratio":0.25,"volume":8}`
	if string(data) != want {
		t.Errorf("json %s, want %s", data, want)
	}
}

func TestRestore(t *testing.T) {
	t.Parallel()
	t.Run("invalid state is ignored", func(t *testing.T) {
		t.Parallel()
		b := openAt(t, 0)
		b.Restore(Snapshot{State: "ajar", Since: at(time.Hour)})
		if s := b.Snapshot(at(time.Second)); s.State != Open || !s.Since.Equal(t0) {
			t.Errorf("after invalid restore: %+v", s)
		}
	})
	t.Run("probes are clamped", func(t *testing.T) {
		t.Parallel()
		b := New(Config{Probes: 2})
		b.Restore(Snapshot{State: HalfOpen, Since: t0, ProbesLeft: 99, ProbeSuccesses: 99})
		s := b.Snapshot(t0)
		if s.ProbesLeft != 2 || s.ProbeSuccesses != 1 {
			t.Errorf("restored probes %d, successes %d; want 2, 1", s.ProbesLeft, s.ProbeSuccesses)
		}
		if st, changed := b.Record(t0, true); st != Closed || !changed {
			t.Errorf("one more success: %s, %v; want closed, true", st, changed)
		}
	})
	t.Run("a new episode empties the window, the same one keeps it", func(t *testing.T) {
		t.Parallel()
		b := New(Config{})
		for range 19 {
			b.Record(t0, false)
		}
		b.Restore(b.Snapshot(t0)) // same state and since
		if v := b.Snapshot(t0).Volume; v != 19 {
			t.Errorf("volume %d after restoring own snapshot, want 19", v)
		}
		b.Restore(Snapshot{State: Closed, Since: t0})
		if v := b.Snapshot(t0).Volume; v != 0 {
			t.Errorf("volume %d after restoring a new closed episode, want 0", v)
		}
	})
}

func TestBucketMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		window  time.Duration
		buckets int
	}{
		{time.Minute, 60},
		{time.Second, 10},
		{10 * time.Minute, 600},
		{24 * time.Hour, 600},
	}
	for _, tc := range tests {
		b := New(Config{Window: tc.window})
		for i := range 10000 {
			b.Record(t0.Add(time.Duration(i)*time.Millisecond), true)
		}
		if len(b.buckets) != tc.buckets {
			t.Errorf("window %s: %d buckets, want %d", tc.window, len(b.buckets), tc.buckets)
		}
	}
}

func TestConcurrentRecord(t *testing.T) {
	t.Parallel()
	t.Run("every outcome is counted", func(t *testing.T) {
		t.Parallel()
		b := New(Config{MinVolume: 1 << 30})
		var wg sync.WaitGroup
		for g := range 50 {
			wg.Go(func() {
				for i := range 100 {
					b.Record(at(time.Duration(i%10)*time.Second), (g+i)%2 == 0)
					b.Allow(at(time.Duration(i%10) * time.Second))
				}
			})
		}
		wg.Wait()
		s := b.Snapshot(at(10 * time.Second))
		if s.Volume != 5000 || s.FailureRatio != 0.5 || s.State != Closed {
			t.Errorf("Snapshot = %+v, want 5000 outcomes, ratio 0.5, closed", s)
		}
	})
	t.Run("opens exactly once", func(t *testing.T) {
		t.Parallel()
		b := New(Config{})
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			opened int
		)
		for range 20 {
			wg.Go(func() {
				for range 10 {
					if s, changed := b.Record(t0, false); changed && s == Open {
						mu.Lock()
						opened++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if opened != 1 {
			t.Errorf("%d Record calls reported opening, want 1", opened)
		}
	})
}

// TestHalfOpenTimesOut: probes whose outcomes never arrive (their tasks were
// cancelled, say) do not leave the breaker half-open with none left for
// ever: after ProbeTimeout a fresh set is let through.
func TestHalfOpenTimesOut(t *testing.T) {
	cfg := Config{Window: time.Minute, MinVolume: 2, Threshold: 0.5, Cooldown: 10 * time.Second, Probes: 2, ProbeTimeout: 30 * time.Second}
	b := New(cfg)
	t0 := time.Unix(1_000_000, 0)
	b.Record(t0, false)
	b.Record(t0, false)
	if st, _ := b.State(t0); st != Open {
		t.Fatalf("state %s, want open", st)
	}
	half := t0.Add(10 * time.Second)
	if !b.Allow(half) || !b.Allow(half) || b.Allow(half) {
		t.Fatal("half-open must let exactly 2 probes through")
	}
	if b.Allow(half.Add(29 * time.Second)) {
		t.Fatal("a probe let through before the probe timeout")
	}
	later := half.Add(31 * time.Second)
	if !b.Allow(later) {
		t.Fatal("no fresh probe after the probe timeout")
	}
	if s := b.Snapshot(later); s.State != HalfOpen || !s.Since.Equal(half.Add(30*time.Second)) || s.ProbesLeft != 1 {
		t.Fatalf("snapshot %+v", s)
	}
	// Two successes close it.
	b.Record(later, true)
	if st, _ := b.Record(later, true); st != Closed {
		t.Fatalf("state %s after two successful probes, want closed", st)
	}
}
