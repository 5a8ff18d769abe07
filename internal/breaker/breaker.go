// Package breaker is a circuit breaker state machine for one key, such as a
// task type. It is pure: it does no I/O and reads no clock — every method takes
// the current time — so its decisions are reproducible and its state can be
// shared between orchestrators through Snapshot and Restore.
//
// A breaker starts closed and lets everything through. When the share of
// failures among the outcomes recorded in a sliding window exceeds a threshold
// (given enough outcomes), it opens and lets nothing through. After a cooldown
// it turns half-open and lets a few probe tasks through: one failed probe opens
// it again, enough successful ones close it.
package breaker

import (
	"math"
	"sync"
	"time"
)

// State is the state of a breaker.
type State string

// The states of a breaker.
const (
	// Closed lets every task through.
	Closed State = "closed"
	// Open lets no task through until the cooldown has passed.
	Open State = "open"
	// HalfOpen lets a limited number of probe tasks through.
	HalfOpen State = "half_open"
)

// Valid reports whether s is one of Closed, Open and HalfOpen.
func (s State) Valid() bool {
	return s == Closed || s == Open || s == HalfOpen
}

// Defaults for Config.
const (
	DefaultWindow    = time.Minute
	DefaultThreshold = 0.5
	DefaultMinVolume = 20
	DefaultCooldown  = 30 * time.Second
	DefaultProbes    = 3
	// DefaultProbeTimeout is how long a half-open breaker waits for its
	// probes' outcomes before it lets a fresh set through.
	DefaultProbeTimeout = time.Minute
)

// The sliding window is kept in between minBuckets and maxBuckets buckets of
// equal width, one second wide where that fits.
const (
	minBuckets = 10
	maxBuckets = 600
)

// Config configures a Breaker. Zero or negative fields take their defaults.
type Config struct {
	// Window is the span of the sliding window of outcomes. Default 1m.
	Window time.Duration
	// Threshold is the failure ratio in the window above which the breaker
	// opens (it opens when failures/outcomes > Threshold, so a Threshold of 1
	// or more never opens it). Default 0.5.
	Threshold float64
	// MinVolume is the number of outcomes the window must hold before the
	// breaker can open. Default 20.
	MinVolume int
	// Cooldown is how long the breaker stays open before turning half-open.
	// Default 30s.
	Cooldown time.Duration
	// Probes is the number of tasks let through while half-open, and the
	// number of successes among them that close the breaker. Default 3.
	Probes int
	// ProbeTimeout bounds half-open: when its probes' outcomes have not
	// all arrived this long after it turned half-open (a probe's task was
	// cancelled, or its outcome lost), it starts over with a fresh set of
	// probes instead of staying half-open with none left for ever.
	// Default 1m.
	ProbeTimeout time.Duration
}

// WithDefaults returns c with zero or negative fields (and a NaN Threshold)
// set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Threshold <= 0 || math.IsNaN(c.Threshold) {
		c.Threshold = DefaultThreshold
	}
	if c.MinVolume <= 0 {
		c.MinVolume = DefaultMinVolume
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.Probes <= 0 {
		c.Probes = DefaultProbes
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	return c
}

// bucket counts the outcomes of one slice of time: index idx of the slices of
// the bucket width counted from the Unix epoch.
type bucket struct {
	idx           int64
	succ, failure int
}

// Breaker tracks one key's outcomes. Safe for concurrent use.
//
// The sliding window is a ring of buckets (one second wide for windows of up
// to 10 minutes), so its memory does not grow with the number of outcomes: an
// outcome leaves the window between one bucket width short of Window and
// Window after it was recorded. Times must lie within the years 1678–2262.
type Breaker struct {
	cfg   Config
	width int64 // bucket width in nanoseconds

	mu         sync.Mutex
	buckets    []bucket
	state      State
	since      time.Time
	probesLeft int
	successes  int // successful probes in the current half-open episode
}

// New returns a closed breaker with cfg (after WithDefaults) whose state
// began at the zero time.
func New(cfg Config) *Breaker {
	cfg = cfg.WithDefaults()
	sec := int64(time.Second)
	n := (int64(cfg.Window) + sec - 1) / sec
	n = min(max(n, minBuckets), maxBuckets)
	width := (int64(cfg.Window) + n - 1) / n
	return &Breaker{cfg: cfg, width: width, buckets: newRing(n), state: Closed}
}

func newRing(n int64) []bucket {
	r := make([]bucket, n)
	for i := range r {
		r[i].idx = math.MinInt64 // outside any window
	}
	return r
}

// Config returns the breaker's configuration, with defaults applied.
func (b *Breaker) Config() Config { return b.cfg }

// Record adds an outcome observed at now. In closed it may open the breaker;
// in half_open, a failure re-opens it at once (restarting the cooldown) and
// Probes successes close it, emptying the window. Outcomes recorded while open
// — of tasks dispatched before it opened — are ignored; in half_open every
// outcome counts, as the breaker cannot tell probes from stragglers.
//
// Record returns the state after, and whether the state changed during the
// call; that includes the move from open to half_open once the cooldown has
// passed and a re-opening that leaves it open with a new Since.
func (b *Breaker) Record(now time.Time, success bool) (State, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := b.advance(now)
	switch b.state {
	case Closed:
		b.add(now, success)
		if volume, failures := b.totals(now); volume >= b.cfg.MinVolume &&
			float64(failures)/float64(volume) > b.cfg.Threshold {
			b.enter(Open, now)
			changed = true
		}
	case HalfOpen:
		if !success {
			b.enter(Open, now)
			return Open, true
		}
		b.successes++
		if b.successes >= b.cfg.Probes {
			b.enter(Closed, now)
			changed = true
		}
	}
	return b.state, changed
}

// State returns the state at now, moving open → half_open when the cooldown
// has passed (and reporting whether that move happened). The half-open state
// counts from the end of the cooldown, not from now, so breakers that share a
// snapshot agree on it.
func (b *Breaker) State(now time.Time) (State, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := b.advance(now)
	return b.state, changed
}

// Allow reports whether a task may be dispatched at now: always in closed;
// never in open; in half_open only while probes remain (each true consumes
// one probe).
//
// A half-open breaker is decided only by recorded outcomes, so a caller that
// gives up on a probe (it timed out, say) should Record it as a failure, or
// the breaker stays half-open with no probes left.
func (b *Breaker) Allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	switch b.state {
	case Closed:
		return true
	case HalfOpen:
		if b.probesLeft > 0 {
			b.probesLeft--
			return true
		}
	}
	return false
}

// Snapshot is a breaker's state as persisted in storage, through which
// orchestrators share it.
type Snapshot struct {
	// State is the breaker's state.
	State State `json:"state"`
	// Since is when the breaker entered State (the zero time for a breaker
	// that has been closed since New).
	Since time.Time `json:"since"`
	// ProbesLeft is the number of probes half_open still lets through.
	ProbesLeft int `json:"probes_left"`
	// ProbeSuccesses is the number of successful probes recorded in the
	// current half_open state.
	ProbeSuccesses int `json:"probe_successes"`
	// FailureRatio is the share of failures in the window (0 when empty).
	// Informational: Restore ignores it.
	FailureRatio float64 `json:"failure_ratio"`
	// Volume is the number of outcomes in the window. Informational: Restore
	// ignores it.
	Volume int `json:"volume"`
}

// Snapshot returns the breaker's state at now (moving open → half_open when
// the cooldown has passed, as State does) and its window's figures.
func (b *Breaker) Snapshot(now time.Time) Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	volume, failures := b.totals(now)
	ratio := 0.0
	if volume > 0 {
		ratio = float64(failures) / float64(volume)
	}
	return Snapshot{
		State:          b.state,
		Since:          b.since,
		ProbesLeft:     b.probesLeft,
		ProbeSuccesses: b.successes,
		FailureRatio:   ratio,
		Volume:         volume,
	}
}

// Restore sets the state from a persisted snapshot: State, Since, and in
// half_open ProbesLeft and ProbeSuccesses (clamped to the configured Probes).
// The breaker's own window is kept when the snapshot continues its current
// state (same State and Since) and emptied otherwise; the snapshot's
// FailureRatio and Volume are not restored. A snapshot with an invalid State
// is ignored.
func (b *Breaker) Restore(s Snapshot) {
	if !s.State.Valid() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.State != b.state || !s.Since.Equal(b.since) {
		b.buckets = newRing(int64(len(b.buckets)))
	}
	b.state, b.since = s.State, s.Since
	b.probesLeft, b.successes = 0, 0
	if s.State == HalfOpen {
		b.probesLeft = min(max(s.ProbesLeft, 0), b.cfg.Probes)
		b.successes = min(max(s.ProbeSuccesses, 0), b.cfg.Probes-1)
	}
}

// advance moves open → half_open once the cooldown has passed, and a
// half_open whose probes timed out into a fresh half_open, and reports
// whether it did. The times are derived from since, not now, so breakers
// sharing a snapshot agree. Callers hold mu.
func (b *Breaker) advance(now time.Time) bool {
	switch b.state {
	case Open:
		end := b.since.Add(b.cfg.Cooldown)
		if now.Before(end) {
			return false
		}
		b.enter(HalfOpen, end)
		return true
	case HalfOpen:
		if b.probesLeft == b.cfg.Probes {
			return false // no probe taken yet: nothing to time out
		}
		timeouts := now.Sub(b.since) / b.cfg.ProbeTimeout
		if timeouts < 1 {
			return false
		}
		b.enter(HalfOpen, b.since.Add(timeouts*b.cfg.ProbeTimeout))
		return true
	}
	return false
}

// enter moves to state s at time at. Callers hold mu.
func (b *Breaker) enter(s State, at time.Time) {
	b.state, b.since = s, at
	b.probesLeft, b.successes = 0, 0
	switch s {
	case HalfOpen:
		b.probesLeft = b.cfg.Probes
	case Closed:
		b.buckets = newRing(int64(len(b.buckets)))
	}
}

// index returns the index of the bucket holding time t.
func (b *Breaker) index(t time.Time) int64 {
	ns := t.UnixNano()
	i := ns / b.width
	if ns%b.width < 0 {
		i-- // floor, for times before 1970
	}
	return i
}

// add records an outcome at now. Callers hold mu.
func (b *Breaker) add(now time.Time, success bool) {
	idx := b.index(now)
	n := int64(len(b.buckets))
	bk := &b.buckets[((idx%n)+n)%n]
	switch {
	case bk.idx > idx:
		// The slot holds a newer bucket, so idx is at least a whole window
		// older than the newest outcome: it no longer counts.
		return
	case bk.idx < idx:
		*bk = bucket{idx: idx}
	}
	if success {
		bk.succ++
	} else {
		bk.failure++
	}
}

// totals returns the number of outcomes and of failures in the window ending
// at now. Callers hold mu.
func (b *Breaker) totals(now time.Time) (volume, failures int) {
	cur := b.index(now)
	oldest := cur - int64(len(b.buckets)) // exclusive
	for _, bk := range b.buckets {
		if bk.idx > oldest && bk.idx <= cur {
			volume += bk.succ + bk.failure
			failures += bk.failure
		}
	}
	return volume, failures
}
