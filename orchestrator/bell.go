package orchestrator

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
)

// bellGap is the shortest time between two rings of one level's doorbell:
// dispatches closer together share a ring (the last of them is always
// rung, at most bellGap after it was stored).
const bellGap = time.Millisecond

// bells rings the doorbells of the levels the orchestrator dispatches on
// (subject.Bell): an empty core NATS message that wakes the level's idle
// executors, so they pull at once instead of at their next idle probe.
// A ring is a hint: one lost delays a pull by at most the executors' idle
// probe. Rings of one level are coalesced to one per bellGap (the last
// one trailing), so a busy level costs a ring per bellGap, not per task.
type bells struct {
	nc *nats.Conn

	mu     sync.Mutex
	levels map[string]*bellState
}

type bellState struct {
	last    time.Time // when the level was last rung
	pending bool      // a trailing ring is scheduled
}

func newBells(nc *nats.Conn) *bells { return &bells{nc: nc, levels: map[string]*bellState{}} }

// ring rings the doorbell of a capability's priority level, now or (when
// it was rung less than bellGap ago) once at the end of the gap.
func (b *bells) ring(capability string, priority int) {
	subj := subject.Bell(capability, priority)
	now := time.Now()
	b.mu.Lock()
	st := b.levels[subj]
	if st == nil {
		st = &bellState{}
		b.levels[subj] = st
	}
	if st.pending {
		b.mu.Unlock()
		return
	}
	if wait := bellGap - now.Sub(st.last); wait > 0 {
		st.pending = true
		b.mu.Unlock()
		time.AfterFunc(wait, func() {
			b.mu.Lock()
			st.pending = false
			st.last = time.Now()
			b.mu.Unlock()
			_ = b.nc.Publish(subj, nil)
		})
		return
	}
	st.last = now
	b.mu.Unlock()
	_ = b.nc.Publish(subj, nil) // a hint: a failed ring only delays a pull
}
