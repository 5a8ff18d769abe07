// Package gopool runs functions on goroutines kept for the next one. A
// goroutine started per task grows its stack on the task's deep call path
// each time (stack copying was 5 % of the bench's CPU: the executor's
// handler calls, the orchestrator's batch items); one that ran a task
// before has its stack grown already. Idle goroutines end after a while,
// so a burst does not hold its stacks for ever.
package gopool

import (
	"sync"
	"time"
)

// Pool runs functions on reused goroutines. Its goroutines run from Go
// until they have been idle for its keep time, or until Close.
type Pool struct {
	idle chan func() // unbuffered: a send succeeds when a goroutine waits
	keep time.Duration
	stop chan struct{}
	once sync.Once
}

// New returns a Pool whose goroutines end after keep idle.
func New(keep time.Duration) *Pool {
	return &Pool{idle: make(chan func()), keep: keep, stop: make(chan struct{})}
}

// Go runs f on an idle goroutine of the pool, or on a new one. It does not
// wait for f, and never blocks.
func (p *Pool) Go(f func()) {
	select {
	case p.idle <- f:
	default:
		go p.run(f)
	}
}

func (p *Pool) run(f func()) {
	t := time.NewTimer(p.keep)
	defer t.Stop()
	for {
		f()
		t.Reset(p.keep)
		select {
		case f = <-p.idle:
		case <-t.C:
			return
		case <-p.stop:
			return
		}
	}
}

// Close ends the idle goroutines; a busy one ends when its function
// returns (their callers wait for the functions, if they need to). Go
// after Close still runs f, on a goroutine of its own that ends with it.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.stop) })
}
