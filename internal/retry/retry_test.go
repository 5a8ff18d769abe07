package retry

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{}
	tests := []struct {
		n    int
		u    float64
		want time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{3, 0, 4 * time.Second},
		{5, 0, 16 * time.Second},
		{1, 0.999999, 1499999 * time.Microsecond},
		{3, 0.5, 5 * time.Second},
		{40, 0, DefaultMax},
		{1000, 0, DefaultMax},
		{0, 0, time.Second},
	}
	for _, tt := range tests {
		got := p.Delay(tt.n, tt.u)
		if diff := got - tt.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("Delay(%d, %v) = %v, want %v", tt.n, tt.u, got, tt.want)
		}
	}
}

func TestDelayJitterBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Factor: 3, Max: time.Hour}
	for n := 1; n <= 6; n++ {
		lo := p.Delay(n, 0)
		hi := p.Delay(n, 0.9999999)
		if hi < lo || float64(hi) > float64(lo)*1.5 {
			t.Errorf("retry %d: jitter range [%v, %v] is not within +0..50%%", n, lo, hi)
		}
	}
	noJitter := Policy{Jitter: -1}
	if a, b := noJitter.Delay(2, 0), noJitter.Delay(2, 0.9); a != b {
		t.Errorf("disabled jitter still varies: %v vs %v", a, b)
	}
}
