package task

import (
	"fmt"
	"strings"
	"time"
)

// MaxKeyConcurrency bounds KeyLimit.Concurrency: the slots of one key are
// one record, rewritten as each slot is taken and freed.
const MaxKeyConcurrency = 10_000

// KeyLimit is a limit on the tasks whose keys match Key, a pattern of
// dot-separated tokens where "*" matches one token and a final ">" one or
// more ("customer.*", "customer.>", or one key such as "customer.42").
// Each matching key gets its own limit: "customer.*" with Concurrency 5
// lets every customer run 5. When several patterns match a key, the most
// specific wins: the one with the most literal tokens, then the fewest
// wildcards.
//
// Concurrency, Rate and Adaptive apply to a task's ConcurrencyKey; Weight
// to its FairnessKey. Zero fields limit nothing.
type KeyLimit struct {
	// Key is the pattern the limit applies to.
	Key string `json:"key"`
	// Concurrency is the most tasks of one key dispatched or running at
	// once across the cluster (1 … MaxKeyConcurrency). A task over it
	// stays ready, with a reason, until a slot frees: when an attempt ends
	// (report, lease expiry, the reconciler).
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is the most starts (first attempts and retries alike) of one
	// key per Per; a start over it moves to the next window with room.
	Rate int `json:"rate,omitempty"`
	// Per is the rate's window (default 1s).
	Per Duration `json:"per,omitempty"`
	// Adaptive lets the orchestrator move the concurrency limit between
	// MinConcurrency and Concurrency by the attempts' outcomes: it shrinks
	// when attempts fail and will retry (a handler's RetryAfter, an HTTP
	// 429's) or take longer than TargetLatency, and grows back one slot
	// per limit's worth of successes (AIMD). Requires Concurrency.
	Adaptive bool `json:"adaptive,omitempty"`
	// MinConcurrency is the adaptive limit's floor (default 1).
	MinConcurrency int `json:"min_concurrency,omitempty"`
	// TargetLatency, when set, shrinks the adaptive limit when a
	// successful attempt took longer.
	TargetLatency Duration `json:"target_latency,omitempty"`
	// Weight is a fairness key's share of its level's dispatches while
	// keys take turns (default 1, at most 1,000).
	Weight int `json:"weight,omitempty"`
	// Reason, By and At say who set the limit last, when and why (set by
	// the orchestrator that stored it).
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// Window returns the rate's window with its default.
func (l KeyLimit) Window() time.Duration {
	if l.Per <= 0 {
		return time.Second
	}
	return l.Per.Std()
}

// Floor returns the adaptive limit's floor with its default.
func (l KeyLimit) Floor() int {
	if l.MinConcurrency <= 0 {
		return 1
	}
	return min(l.MinConcurrency, l.Concurrency)
}

// Validate checks a limit; a rejection is a *ValidationError.
func (l KeyLimit) Validate() error {
	switch {
	case !ValidKeyPattern(l.Key):
		return &ValidationError{"key", fmt.Sprintf("%q is not dot-separated tokens of [A-Za-z0-9_-], \"*\" or a final \">\"", l.Key)}
	case l.Concurrency < 0 || l.Concurrency > MaxKeyConcurrency:
		return &ValidationError{"concurrency", fmt.Sprintf("%d is out of range 0..%d", l.Concurrency, MaxKeyConcurrency)}
	case l.Rate < 0 || l.Rate > 1_000_000:
		return &ValidationError{"rate", fmt.Sprintf("%d is out of range 0..1000000", l.Rate)}
	case l.Per < 0 || l.Per.Std() > 24*time.Hour:
		return &ValidationError{"per", "must be between 0 and 24h"}
	case l.Rate > 0 && l.Window() < time.Millisecond:
		return &ValidationError{"per", "must be at least 1ms"}
	case l.Adaptive && l.Concurrency == 0:
		return &ValidationError{"adaptive", "needs a concurrency limit to adapt below"}
	case l.MinConcurrency < 0 || l.MinConcurrency > l.Concurrency:
		return &ValidationError{"min_concurrency", fmt.Sprintf("%d is out of range 0..%d (the concurrency)", l.MinConcurrency, l.Concurrency)}
	case l.TargetLatency < 0:
		return &ValidationError{"target_latency", "must not be negative"}
	case l.Weight < 0 || l.Weight > 1000:
		return &ValidationError{"weight", fmt.Sprintf("%d is out of range 0..1000", l.Weight)}
	case l.Concurrency == 0 && l.Rate == 0 && l.Weight == 0:
		return &ValidationError{"key", "the limit sets nothing: give a concurrency, a rate or a weight"}
	}
	return nil
}

// ValidKey reports whether k can be a FairnessKey or ConcurrencyKey:
// dot-separated tokens of [A-Za-z0-9_-], as a task type.
func ValidKey(k string) bool { return ValidType(k) }

// ValidKeyPattern reports whether p can be a KeyLimit's Key: a key whose
// tokens may also be "*", and whose last token may be ">".
func ValidKeyPattern(p string) bool {
	tokens := strings.Split(p, ".")
	if len(tokens) > 8 {
		return false
	}
	for i, tok := range tokens {
		switch {
		case tok == "*":
		case tok == ">" && i == len(tokens)-1:
		case !ValidCapability(tok):
			return false
		}
	}
	return true
}

// MatchKey reports whether key matches pattern (see KeyLimit.Key).
func MatchKey(pattern, key string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		kt, krest, kmore := strings.Cut(key, ".")
		switch {
		case pt == ">":
			return true
		case pt != "*" && pt != kt:
			return false
		case !pmore || !kmore:
			return pmore == kmore
		}
		pattern, key = prest, krest
	}
}

// specificity orders patterns: more literal tokens first, then fewer
// wildcards.
func specificity(pattern string) (literal, wild int) {
	for tok := range strings.SplitSeq(pattern, ".") {
		if tok == "*" || tok == ">" {
			wild++
		} else {
			literal++
		}
	}
	return literal, wild
}

// MatchLimit returns the most specific limit of limits matching key that
// sets what has (a field's name: "concurrency", "rate" or "weight"), and
// whether one does. Ties go to the pattern first in byte order.
func MatchLimit(limits []KeyLimit, key, has string) (KeyLimit, bool) {
	var best KeyLimit
	found := false
	for _, l := range limits {
		switch {
		case has == "concurrency" && l.Concurrency == 0,
			has == "rate" && l.Rate == 0,
			has == "weight" && l.Weight == 0:
			continue
		}
		if !MatchKey(l.Key, key) {
			continue
		}
		if !found || moreSpecific(l.Key, best.Key) {
			best, found = l, true
		}
	}
	return best, found
}

func moreSpecific(a, b string) bool {
	al, aw := specificity(a)
	bl, bw := specificity(b)
	switch {
	case al != bl:
		return al > bl
	case aw != bw:
		return aw < bw
	}
	return a < b
}

// ConfiguredLimits is the AX_CONTROL value limits.configured: the key
// limits of the orchestrators' configuration, as the last orchestrator to
// start had them (give every orchestrator the same list).
type ConfiguredLimits struct {
	// Limits are orchestrator.Config.KeyLimits.
	Limits []KeyLimit `json:"limits"`
	// By is the orchestrator that wrote them, At when.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// Slots is the value of a concurrency key in the AX_SLOTS bucket: the
// tasks holding its slots (by id, since when) and, under an adaptive
// limit, the limit's current value.
type Slots struct {
	// Holders are the tasks dispatched or running under the key, at most
	// the limit.
	Holders map[string]time.Time `json:"h,omitempty"`
	// Limit is an adaptive limit's current value (0: not adaptive); the
	// slots it allows are its integer part.
	Limit float64 `json:"l,omitempty"`
	// Lowered is when an adaptive limit was last lowered.
	Lowered time.Time `json:"d,omitzero"`
	// Latency is an adaptive limit's moving average of its successful
	// attempts' durations, in milliseconds: the limit is lowered at most
	// once per Latency (one round of attempts).
	Latency float64 `json:"rt,omitempty"`
}
