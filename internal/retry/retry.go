// Package retry computes when a failed attempt is retried: exponential
// backoff with 0–50 % additive jitter, capped.
package retry

import (
	"math"
	"time"
)

// Defaults from the design notes: 1 s, 2 s, 4 s, … plus up to 50 % jitter.
const (
	DefaultBase   = time.Second
	DefaultFactor = 2.0
	DefaultMax    = 10 * time.Minute
	DefaultJitter = 0.5
)

// Policy is an exponential backoff policy.
type Policy struct {
	// Base is the delay before the first retry. Default 1s.
	Base time.Duration
	// Factor multiplies the delay for each further retry. Default 2.
	Factor float64
	// Max caps the delay before jitter. Default 10m.
	Max time.Duration
	// Jitter is the largest random fraction added to the delay (0.5 adds
	// 0–50 %). Default 0.5; negative disables jitter.
	Jitter float64
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	if p.Base <= 0 {
		p.Base = DefaultBase
	}
	if p.Factor < 1 {
		p.Factor = DefaultFactor
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	if p.Jitter == 0 {
		p.Jitter = DefaultJitter
	}
	if p.Jitter < 0 {
		p.Jitter = 0
	}
	return p
}

// Delay returns the wait before retry number n (1 = the first retry, after
// attempt 1 failed). u is a uniform random number in [0,1) that scales the
// jitter; pass rand.Float64().
func (p Policy) Delay(n int, u float64) time.Duration {
	p = p.WithDefaults()
	if n < 1 {
		n = 1
	}
	d := float64(p.Base) * math.Pow(p.Factor, float64(n-1))
	if d > float64(p.Max) || math.IsInf(d, 0) {
		d = float64(p.Max)
	}
	d += d * p.Jitter * u
	return time.Duration(d)
}
