package executor

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Passing on. A capability's ready consumers are shared by all its
// executors, so a dispatch of a type this executor has no handler for
// reaches it all the same (another executor of the capability handles
// that type, or none does yet). It hands such a dispatch back at once for
// another executor, spending no attempt — failing it would spend one, and
// dead-letter a task another executor could run. The hand-back is delayed
// more each time the dispatch comes back (passDelay), up to the idle
// probe's default interval: a task that no executor handles costs two
// messages (its redelivery and the hand-back) every 5 s while it waits —
// visibly: ax status and the console read the workers registry and say
// that no executor handles its type — until one that does starts (it
// gets the task at one of the next redeliveries: whichever executor of
// the capability pulls first takes each), or its dispatch timeout ends
// it.

const (
	// passFirstDelay is the delay of a dispatch's first hand-back,
	// doubled every second delivery up to passMaxDelay.
	passFirstDelay = 10 * time.Millisecond
	passMaxDelay   = DefaultIdleProbe
)

// passDelay is the redelivery delay of a dispatch handed back after its
// delivered-th delivery: it doubles every second delivery, so a dispatch
// that another executor handles is rarely kept waiting long (each
// redelivery goes to whichever executor pulls first: with two, one that
// was passed on 10 times has waited 1.5 s in all), and one that none
// handles costs 20 hand-backs before it waits passMaxDelay between them.
func passDelay(delivered uint64) time.Duration {
	d := passFirstDelay
	for i := uint64(2); i < delivered && d < passMaxDelay; i += 2 {
		d *= 2
	}
	return min(d, passMaxDelay)
}

// passed remembers the task types this executor passed on, to warn once
// per type.
type passed struct {
	mu    sync.Mutex
	types map[string]bool
}

// first reports whether typ is passed on for the first time.
func (p *passed) first(typ string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.types[typ] {
		return false
	}
	if p.types == nil {
		p.types = map[string]bool{}
	}
	p.types[typ] = true
	return true
}

// passOn hands back the dispatch of a task this executor has no handler
// for (see above). When the dispatch can be delivered again, it rings the
// capability's doorbell, so idle executors that handle the type pull it
// then rather than at their next idle probe (a redelivery rings nothing
// by itself).
func (e *Executor) passOn(msg jetstream.Msg, d task.Dispatch) {
	delivered := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	delay := passDelay(delivered)
	if err := msg.NakWithDelay(delay); err != nil {
		e.log.Debug("hand-back of a dispatch failed; it is redelivered after the ack wait", "task_id", d.ID, "error", err)
	}
	if e.passed.first(d.Type) {
		e.log.Warn("tasks of a type this executor has no handler for reach it: passed on to the capability's other executors, spending no attempt (logged once per type)",
			"type", d.Type, "capability", d.Capability, "task_id", d.ID)
	}
	bell := subject.Bell(d.Capability, d.PriorityLevel())
	// The timer's callback only publishes (an error once the connection
	// is closed): it needs no owner to stop it.
	time.AfterFunc(delay, func() { _ = e.nc.Publish(bell, nil) })
}
