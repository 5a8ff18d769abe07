// Package swrr is smooth weighted round robin (the nginx algorithm): over any
// run of picks among the same eligible items, each item's share follows its
// weight, and picks of one item are spread out rather than bunched.
package swrr

// Picker picks indexes by weight. It is not safe for concurrent use.
type Picker struct {
	weights []int
	current []int
}

// New returns a picker over len(weights) items. Weights ≤ 0 are never picked.
func New(weights []int) *Picker {
	return &Picker{weights: append([]int(nil), weights...), current: make([]int, len(weights))}
}

// Next picks among the items for which eligible returns true, or returns -1
// when none is eligible (or all eligible weights are zero).
func (p *Picker) Next(eligible func(i int) bool) int {
	best, total := -1, 0
	for i, w := range p.weights {
		if w <= 0 || !eligible(i) {
			continue
		}
		p.current[i] += w
		total += w
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best >= 0 {
		p.current[best] -= total
	}
	return best
}

// PriorityWeights are the shares of priorities p0…p5 wherever tasks of
// several priorities compete for one thing — an executor's pulls, a
// concurrency key's freed slots: 40, 25, 15, 10, 6, 4. Higher priorities
// go first most of the time, and a lower one is never starved.
func PriorityWeights() [6]int { return [6]int{40, 25, 15, 10, 6, 4} }
