package orchestrator

import (
	"testing"

	"github.com/ax-run/ax/internal/groupcommit"
)

// TestBatchWorkers: without group commit a batch direct request is applied
// directBatchWorkers messages at a time; with it, all of a batch up to a
// group's most at once, so that its record writes join one group commit
// instead of waiting for several in series.
func TestBatchWorkers(t *testing.T) {
	o := &Orchestrator{}
	for _, n := range []int{1, 256, 1000} {
		if got := o.batchWorkers(n); got != directBatchWorkers {
			t.Errorf("without group commit, a batch of %d: %d at once, want %d", n, got, directBatchWorkers)
		}
	}
	o.committer = &groupcommit.Committer{}
	for n, want := range map[int]int{1: directBatchWorkers, 100: 100, 256: groupcommit.DefaultMaxBatch, 1000: groupcommit.DefaultMaxBatch} {
		if got := o.batchWorkers(n); got != want {
			t.Errorf("with group commit, a batch of %d: %d at once, want %d", n, got, want)
		}
	}
}
