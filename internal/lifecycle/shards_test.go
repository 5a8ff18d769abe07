package lifecycle

import "testing"

func TestMinSucceeded(t *testing.T) {
	for _, c := range []struct {
		fraction float64
		total    int
		want     int
	}{{0.7, 10, 7}, {0.8, 10, 8}, {0.95, 100, 95}, {0.5, 3, 2}, {1, 7, 7}, {0.01, 1, 1}, {0.3, 0, 0}} {
		if got := MinSucceeded(c.fraction, c.total); got != c.want {
			t.Errorf("MinSucceeded(%v, %d) = %d, want %d", c.fraction, c.total, got, c.want)
		}
	}
}
