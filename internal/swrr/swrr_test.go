package swrr

import "testing"

func all(int) bool { return true }

func TestSharesFollowWeights(t *testing.T) {
	weights := []int{40, 25, 15, 10, 6, 4}
	p := New(weights)
	counts := make([]int, len(weights))
	for range 1000 {
		counts[p.Next(all)]++
	}
	for i, w := range weights {
		if counts[i] != w*10 {
			t.Errorf("level %d: %d picks of 1000, want %d", i, counts[i], w*10)
		}
	}
}

func TestSmoothness(t *testing.T) {
	p := New([]int{5, 1, 1})
	var seq []int
	for range 7 {
		seq = append(seq, p.Next(all))
	}
	want := []int{0, 0, 1, 0, 2, 0, 0}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("sequence %v, want %v", seq, want)
		}
	}
}

func TestEligibility(t *testing.T) {
	tests := []struct {
		name     string
		weights  []int
		eligible func(int) bool
		want     []int // allowed results
	}{
		{"none eligible", []int{1, 1}, func(int) bool { return false }, []int{-1}},
		{"only last", []int{40, 4}, func(i int) bool { return i == 1 }, []int{1}},
		{"zero weight skipped", []int{0, 3}, all, []int{1}},
		{"all zero", []int{0, 0}, all, []int{-1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(tt.weights)
			for range 5 {
				got := p.Next(tt.eligible)
				ok := false
				for _, w := range tt.want {
					ok = ok || got == w
				}
				if !ok {
					t.Fatalf("Next = %d, want one of %v", got, tt.want)
				}
			}
		})
	}
}
