package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/swrr"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

// bellWait bounds the wait for a task whose publish rang the doorbell.
const bellWait = 100 * time.Millisecond

// busyProbe is how often levels last seen empty are probed while the
// doorbell is armed and rounds keep finding work (redeliveries do not ring).
const busyProbe = 200 * time.Millisecond

// puller pulls one capability's six priority levels by smooth weighted round
// robin across the levels that have work.
//
// A pull round takes as many tasks as the free capacity allows: first one
// probe of every level last seen empty (highest priority first), so work that
// appears on an idle level — a P0 behind a P5 backlog — is taken in the next
// round; then the rest is shared among levels with work by their weights.
// When a round finds nothing the puller sleeps on a core subscription to
// ax.bell.<capability>.* (the doorbell: an empty message the orchestrators
// publish after dispatching on a level) instead of polling, re-checking
// every IdleProbe for redeliveries.
//
// The doorbell stays armed while rounds take less than they could (a
// moderate rate: each wake-up fetches the levels it rang for, a request or
// two per task instead of a probe of every level), and is dropped when a
// round fills the free capacity (a backlog: pulls find work without it, and
// it would cost a message per ring). While it is armed, dispatches ring it,
// so levels last seen empty are probed only every busyProbe, for what
// arrives without a publish (redeliveries).
type puller struct {
	e          *Executor
	s          *session
	capability string
	levels     [task.Levels]jetstream.Consumer
	picker     *swrr.Picker
	empty      [task.Levels]bool

	bell    *nats.Subscription
	bellRng chan struct{}
	// rung has bit N set when the doorbell rang for level N.
	rung atomic.Uint32
	// failures counts consecutive failed rounds.
	failures int
	// probed is when levels last seen empty were last probed.
	probed time.Time
	// gone has bit N set when level N's last pull failed as if its
	// consumer did not exist (run creates it again).
	gone uint32
}

func (e *Executor) newPuller(ctx context.Context, s *session, capability string) (*puller, error) {
	p := &puller{e: e, s: s, capability: capability, picker: swrr.New(e.cfg.Weights[:]), bellRng: make(chan struct{}, 1)}
	if err := p.bindLevels(ctx); err != nil {
		if !allUnavailable(err) {
			return nil, err
		}
		// Levels whose consumers NATS could not create for now (no
		// leader, no quorum) are left to the run loop: their pulls find no
		// consumer (pullLevels) and it creates them again (rebind) while
		// the others' tasks run. Under faults an executor restarted
		// waited for every level at once.
		e.log.Warn("starting without some ready consumers; creating them again", "error", err, "capability", capability)
	}
	return p, nil
}

// allUnavailable reports whether err, and each error it joins, is NATS or
// JetStream not answering for now.
func allUnavailable(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !allUnavailable(e) {
				return false
			}
		}
		return true
	}
	return consume.Unavailable(err)
}

// errNotBound: a level's ready consumer has not been created yet.
var errNotBound = errors.New("its ready consumer is not created yet")

// consumerGone reports whether a pull failed because its consumer may not
// exist any more (a pull to a missing consumer has no responders).
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerDoesNotExist) || errors.Is(err, nats.ErrNoResponders)
}

// bindLevels creates (or updates, with this executor's ack wait) the
// capability's six ready consumers on AX_TASKS. A consumer created here
// (before the capability's first dispatch: an orchestrator creates them
// before that) delivers the dispatches stored after it.
func (p *puller) bindLevels(ctx context.Context) error {
	return p.bind(ctx, 1<<task.Levels-1)
}

// rebindWait bounds one try at creating the ready consumers again after
// their pulls failed: while a server restarts, each request would
// otherwise wait the client's whole timeout, and the executor pulls
// nothing meanwhile (six in series held one 16 s in a chaos run).
const rebindWait = 2 * time.Second

// markGone notes that level lvl's pull failed with err: when its consumer
// may be gone, the run loop creates it again (rebind).
func (p *puller) markGone(lvl int, err error) {
	if consumerGone(err) {
		p.gone |= 1 << lvl
	}
}

// rebind creates again the ready consumers of the levels in mask, at once
// and for at most rebindWait; those created are no longer marked gone.
func (p *puller) rebind(ctx context.Context, mask uint32) error {
	ctx, cancel := context.WithTimeout(ctx, rebindWait)
	defer cancel()
	return p.bind(ctx, mask)
}

// bind creates (or updates) the ready consumers of the levels in mask,
// all at once, and returns the first error.
func (p *puller) bind(ctx context.Context, mask uint32) error {
	e, capability := p.e, p.capability
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs [task.Levels]error
	)
	for lvl := range task.Levels {
		if mask&(1<<lvl) == 0 {
			continue
		}
		wg.Go(func() {
			cons, err := e.js.CreateOrUpdateConsumer(ctx, subject.StreamTasks, topology.ReadyConsumer(capability, lvl, e.cfg.AckWait))
			if err != nil {
				errs[lvl] = fmt.Errorf("executor: ready consumer %s p%d: %w", capability, lvl, err)
				return
			}
			mu.Lock()
			p.levels[lvl] = cons
			p.gone &^= 1 << lvl
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs[:]...)
}

func (p *puller) run(ctx context.Context) {
	defer p.sleepDone()
	for ctx.Err() == nil {
		n, ok := p.e.load.free(ctx)
		if !ok {
			return
		}
		n = min(n, p.e.cfg.MaxBatch)
		got, err := p.round(ctx, n)
		if err != nil {
			if p.e.nc.IsClosed() {
				p.e.log.Error("NATS connection closed; this executor stops pulling", "capability", p.capability)
				return
			}
			p.backoff(ctx, err)
			if gone := p.gone; gone != 0 {
				// Deleted by hand or lost (or leaderless for a moment:
				// a pull then has no responders too): create them again,
				// or nobody would ever pull this capability's tasks.
				if err := p.rebind(ctx, gone); err != nil {
					p.e.log.Warn("cannot recreate the ready consumers; retrying", "error", err, "capability", p.capability)
				}
			}
			continue
		}
		p.failures = 0
		if got >= n {
			// It took all it could: more is likely waiting.
			p.sleepDone()
			continue
		}
		if got > 0 {
			continue
		}
		if p.bell == nil {
			// Arm the doorbell, then look once more so a publish between
			// the empty round and the subscription is not missed.
			if p.arm() {
				p.probed = time.Time{} // the look once more probes every level
				continue
			}
		}
		p.sleep(ctx)
	}
}

// round pulls up to n tasks and starts them; it returns how many it took,
// or the first pull error. Each step's pulls of several levels go out
// together and are answered together (pullLevels): a round costs a round
// trip or two, not one per level (with tasks on all six levels and fsync on
// every write, one after another they held an executor of capacity 50 to
// about 4 tasks a pull and 3,600 tasks/s).
func (p *puller) round(ctx context.Context, n int) (got int, err error) {
	// A doorbell rings when the message is published, which can be a moment
	// before the stream has stored it: wait briefly on the levels it rang for.
	rung := p.rung.Swap(0)
	got, err = p.pullOne(ctx, func(lvl int) bool { return rung&(1<<lvl) != 0 }, n, bellWait)
	if err != nil {
		return got, err
	}
	// Probe levels last seen empty, highest priority first (while the
	// doorbell is armed, publishes ring it: only every busyProbe).
	if p.bell == nil || time.Since(p.probed) >= busyProbe {
		p.probed = time.Now()
		k, err := p.pullOne(ctx, func(lvl int) bool { return p.empty[lvl] }, n-got, 0)
		got += k
		if err != nil {
			return got, err
		}
	}
	// Share the rest by weight among levels with work. A pass that took
	// nothing marked at least one more level empty, so this ends; it must
	// not stop before every level was tried: with a capacity of 1 a pass
	// asks only one level, and the work may be on another.
	for pass := 0; pass < task.Levels+3 && n-got > 0; pass++ {
		var alloc [task.Levels]int
		eligible := func(i int) bool { return !p.empty[i] }
		for range n - got {
			lvl := p.picker.Next(eligible)
			if lvl < 0 {
				break
			}
			alloc[lvl]++
		}
		took, err := p.pullLevels(ctx, alloc, 0)
		got += sum(took)
		if err != nil {
			return got, err
		}
		for lvl, k := range took {
			if k < alloc[lvl] {
				p.empty[lvl] = true
			}
		}
		if sum(took) == 0 && p.allEmpty() {
			break
		}
	}
	return got, nil
}

// pullOne pulls one task from each level pick selects, at most room
// levels, highest priority first, all at once (pullLevels), and notes
// which of them were empty. It returns how many it took.
func (p *puller) pullOne(ctx context.Context, pick func(lvl int) bool, room int, wait time.Duration) (int, error) {
	var want [task.Levels]int
	asked := 0
	for lvl := range task.Levels {
		if asked < room && pick(lvl) {
			want[lvl] = 1
			asked++
		}
	}
	took, err := p.pullLevels(ctx, want, wait)
	if err != nil {
		return sum(took), err
	}
	for lvl, k := range took {
		if want[lvl] > 0 {
			p.empty[lvl] = k == 0
		}
	}
	return sum(took), nil
}

func sum(a [task.Levels]int) int {
	n := 0
	for _, k := range a {
		n += k
	}
	return n
}

func (p *puller) allEmpty() bool {
	for _, e := range p.empty {
		if !e {
			return false
		}
	}
	return true
}

// pullLevels takes up to want[lvl] tasks from each level and starts them,
// highest priority first. The pulls go out together, then their messages
// are taken in level order. With wait 0 each takes only what is there;
// otherwise each waits up to wait for its tasks. It returns how many each
// level gave, and the first error; the pulls sent are drained whatever
// failed, so no task delivered is left unstarted until its redelivery.
func (p *puller) pullLevels(ctx context.Context, want [task.Levels]int, wait time.Duration) (took [task.Levels]int, err error) {
	var batches [task.Levels]jetstream.MessageBatch
	// Every message of a batch is delivered after this: how long the
	// executor has held one is at most the time since (execute).
	pulled := time.Now()
	for lvl, n := range want {
		if n <= 0 {
			continue
		}
		if p.levels[lvl] == nil {
			err = cmp.Or(err, fmt.Errorf("pull %s p%d: %w", p.capability, lvl, errNotBound))
			p.gone |= 1 << lvl
			continue
		}
		var b jetstream.MessageBatch
		var perr error
		if wait > 0 {
			b, perr = p.levels[lvl].Fetch(n, jetstream.FetchMaxWait(wait))
		} else {
			b, perr = p.levels[lvl].FetchNoWait(n)
		}
		if perr != nil {
			// The other levels are pulled all the same: one level's
			// consumer without a leader for a moment (a server restarting)
			// does not hold up the others' work.
			err = cmp.Or(err, fmt.Errorf("pull %s p%d: %w", p.capability, lvl, perr))
			p.markGone(lvl, perr)
			continue
		}
		batches[lvl] = b
	}
	for lvl, b := range batches {
		if b == nil {
			continue
		}
		for msg := range b.Messages() {
			took[lvl]++
			p.e.start(p.s, msg, pulled)
		}
		if berr := b.Error(); berr != nil && ctx.Err() == nil {
			if consumerGone(berr) {
				err = cmp.Or(err, fmt.Errorf("pull %s p%d: %w", p.capability, lvl, berr))
				p.markGone(lvl, berr)
				continue
			}
			p.e.log.Debug("pull ended early", "error", berr, "capability", p.capability, "priority", lvl)
		}
	}
	return took, err
}

// maxPullBackoff bounds the wait between failed pulls: a server back
// after an outage is pulled from within it (at 5 s, a level's work
// waited up to 5 s more than its outage; a pull is one small request).
const maxPullBackoff = time.Second

// backoff waits after a failed pull (NATS reconnecting, say): 100ms
// doubling to maxPullBackoff, with one warning per outage.
func (p *puller) backoff(ctx context.Context, err error) {
	if p.failures == 0 {
		p.e.log.Warn("pulling failed; retrying with backoff until NATS answers", "error", err)
	}
	p.failures++
	d := min(100*time.Millisecond<<min(p.failures-1, 6), maxPullBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (p *puller) arm() bool {
	sub, err := p.e.nc.Subscribe(subject.BellCapability(p.capability), func(m *nats.Msg) {
		if lvl, ok := subject.BellLevel(m.Subject); ok {
			p.rung.Or(1 << lvl)
		}
		select {
		case p.bellRng <- struct{}{}:
		default:
		}
	})
	if err != nil {
		p.e.log.Warn("cannot subscribe for new work; polling instead", "error", err)
		return false
	}
	p.bell = sub
	return true
}

// sleep waits for the doorbell, the idle probe interval or the end.
func (p *puller) sleep(ctx context.Context) {
	t := time.NewTimer(p.e.cfg.IdleProbe)
	defer t.Stop()
	select {
	case <-p.bellRng:
		// The doorbell says which levels have new work; the others
		// stay as last seen, probed every busyProbe.
	case <-t.C:
		p.empty = [task.Levels]bool{}
	case <-ctx.Done():
	}
}

// sleepDone drops the doorbell once there is work again.
func (p *puller) sleepDone() {
	if p.bell != nil {
		_ = p.bell.Unsubscribe()
		p.bell = nil
	}
	select {
	case <-p.bellRng:
	default:
	}
}
