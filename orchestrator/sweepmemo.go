package orchestrator

import (
	"sync"
	"sync/atomic"
	"time"
)

// sweepMemo spares a sweep the reads of tasks this orchestrator saw end.
//
// A sweep timer fires ReconcileInterval after its dispatches and reads
// every task it lists (sweep.go): for the tasks that ended meanwhile, as
// nearly all have, that read only finds the end. Run long enough, every
// task cost that read (a million no-op tasks in `ax bench`: 0.46 reads and
// 36 % more CPU a task than 20,000, whose sweeps never fired). So the
// orchestrator that dispatches a task keeps a slot for its execution, marks
// it when it writes that execution's end (a terminal record, whose effects
// its own message ensured, so the sweep's look would have left it alone),
// and when the sweep fires here it skips the marked entries. A sweep that
// fires on another orchestrator, after a restart, or for a task that did
// not end here reads as before: the memo only removes reads that would
// have found a terminal record. A nil memo follows nothing.
type sweepMemo struct {
	mu sync.Mutex
	// running holds the slot of each execution dispatched here whose end
	// was not seen yet, until it ends or its sweep fires.
	running map[string]*sweepSlot
	// timers holds, by sweep timer id, the slots of its entries in order.
	timers map[string]memoTimer
	// interval is how long past its due time a timer's slots are kept
	// (the timer fired elsewhere); pruned at most that often over six.
	interval time.Duration
	pruned   time.Time
}

// sweepSlot says whether its execution's end was written here.
type sweepSlot struct {
	execution string
	ended     atomic.Bool
}

type memoTimer struct {
	at    time.Time
	slots []*sweepSlot
}

// maxSweepMemo bounds the executions the memo follows at once (about
// 100 bytes each): past it (a backlog of that many dispatched tasks), new
// dispatches are read by their sweep, as without the memo.
const maxSweepMemo = 1 << 18

func newSweepMemo(interval time.Duration) *sweepMemo {
	return &sweepMemo{running: map[string]*sweepSlot{}, timers: map[string]memoTimer{}, interval: interval}
}

// dispatched returns the slot of an execution dispatched here, or nil when
// the memo is full.
func (m *sweepMemo) dispatched(executionID string) *sweepSlot {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.running[executionID]; ok {
		return s // dispatched again (an ensure repeated)
	}
	if len(m.running) >= maxSweepMemo {
		return nil
	}
	s := &sweepSlot{execution: executionID}
	m.running[executionID] = s
	return s
}

// ended marks an execution whose end (a terminal record) was written here.
func (m *sweepMemo) ended(executionID string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	s, ok := m.running[executionID]
	delete(m.running, executionID)
	m.mu.Unlock()
	if ok {
		s.ended.Store(true)
	}
}

// stored remembers the slots of a sweep timer's entries (nil where the
// memo follows none), due at at.
func (m *sweepMemo) stored(id string, at time.Time, slots []*sweepSlot, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prune(now)
	for _, s := range slots {
		if s != nil {
			m.timers[id] = memoTimer{at: at, slots: slots}
			return
		}
	}
}

// fired returns and forgets the slots of sweep timer id: which of its n
// entries ended here. Nil when the memo knows nothing of it.
func (m *sweepMemo) fired(id string, n int) []*sweepSlot {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.timers[id]
	if !ok {
		return nil
	}
	m.forget(id, t)
	if len(t.slots) != n {
		return nil
	}
	return t.slots
}

// prune forgets the timers due longer than interval ago: they fired on
// another orchestrator, or were taken over.
func (m *sweepMemo) prune(now time.Time) {
	if now.Sub(m.pruned) < m.interval/6 {
		return
	}
	m.pruned = now
	for id, t := range m.timers {
		if now.Sub(t.at) > m.interval {
			m.forget(id, t)
		}
	}
}

func (m *sweepMemo) forget(id string, t memoTimer) {
	delete(m.timers, id)
	for _, s := range t.slots {
		if s != nil && m.running[s.execution] == s {
			delete(m.running, s.execution)
		}
	}
}
