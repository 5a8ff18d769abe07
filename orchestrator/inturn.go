package orchestrator

import (
	"sync"
	"sync/atomic"
)

// inTurn calls fn(i) for every i below n on at most workers goroutines,
// each taking the next i in turn, and returns when all are done. Handlers
// run deep (task records are copied by value down their calls), and a new
// goroutine grows its stack to hold them, copying it: a goroutine per
// message spent 8 % of the bench's CPU in runtime.copystack, a worker's
// stack grows once for all the messages it takes.
func inTurn(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(n, workers) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}
