package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
)

// Taking over the fairness queues of an orchestrator that is gone.
//
// The one work an orchestrator holds in memory is its fairness queues
// (fair.go): ready tasks waiting for their key's turn, whose durable
// trigger is a sweep timer naming the orchestrator's instance
// (subject.OwnedSweep). Were they left to those timers, a dead
// orchestrator's backlog would wait for its looks: a minute after it was
// queued, and up to ReconcileMaxInterval for tasks queued long. Instead,
// every orchestrator lists the owned sweeps pending in AX_TIMERS every
// orphanScanInterval (one stream info request, filtered by subject) and
// asks each other owner found whether it is still there (its FairOwner
// subject). An owner with no responders at two scans in a row is gone —
// its connection closed: a crash, a kill, a stop; one scan could fall in
// the moment a live orchestrator reconnects to another server, whose
// takeover would be safe (the owner's dispatch of an execution replaced
// is refused) but wasted — and its sweeps are looked at at once, which
// dispatches its queued tasks again under new executions (fairTakeOver;
// of several orchestrators doing so, one's compare-and-set wins each
// task). The sweep's schedule is then replaced by an empty message that
// expires, so it does not fire again. An owner cut off but alive keeps
// its connection, and its tasks, until the server drops it.

// orphanScanInterval is how often an orchestrator looks for the owned
// sweeps of orchestrators that are gone: about the time a dead one's
// fairness queues wait to be taken over.
const orphanScanInterval = 2 * time.Second

// orphanAsk bounds the question to an owner whether it is still there: an
// owner that does not answer in time is left alone this round.
const orphanAsk = 2 * time.Second

// orphanWorkers bounds the sweeps of a gone owner looked at at once.
const orphanWorkers = 4

// goneOwners remembers the orchestrator instances found gone (an instance
// name is new at every start, so a gone one never comes back), so that
// their tasks are taken over without asking each time.
type goneOwners struct {
	mu  sync.Mutex
	set map[string]struct{}
}

// goneOwnersMax bounds what goneOwners remembers; past it, it starts over
// (forgetting costs a question to a gone owner, answered at once).
const goneOwnersMax = 1024

func (g *goneOwners) has(owner string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.set[owner]
	return ok
}

func (g *goneOwners) add(owner string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.set == nil || len(g.set) >= goneOwnersMax {
		g.set = map[string]struct{}{}
	}
	g.set[owner] = struct{}{}
}

// orphanLoop takes over the fairness queues of gone orchestrators until
// ctx ends (see above).
func (o *Orchestrator) orphanLoop(ctx context.Context) {
	defer o.bg.Done()
	tick := time.NewTicker(orphanScanInterval)
	defer tick.Stop()
	var warned time.Time
	suspects := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := o.takeOverOrphans(ctx, suspects)
		if err != nil && ctx.Err() == nil && time.Since(warned) >= time.Minute {
			// JetStream unavailable for a while says so once a minute.
			warned = time.Now()
			o.log.Warn("cannot look for the fairness queues of orchestrators that are gone; looking again", slog.Any("error", err))
		}
	}
}

// takeOverOrphans looks once for the owned sweeps of gone orchestrators
// and looks at their tasks. suspects holds the owners that had no
// responders at the previous scan; it is updated for the next.
func (o *Orchestrator) takeOverOrphans(ctx context.Context, suspects map[string]bool) error {
	info, err := o.timers.Info(ctx, jetstream.WithSubjectFilter(subject.OwnedSweepsAll))
	if err != nil {
		return fmt.Errorf("list the owned sweeps: %w", err)
	}
	byOwner := map[string][]string{}
	for subj := range info.State.Subjects {
		if owner, ok := subject.OwnerOfSweep(subj); ok && owner != o.instance {
			byOwner[owner] = append(byOwner[owner], subj)
		}
	}
	for owner := range suspects {
		if _, ok := byOwner[owner]; !ok {
			delete(suspects, owner)
		}
	}
	var firstErr error
	for owner, subjs := range byOwner {
		if !o.gone.has(owner) {
			actx, cancel := context.WithTimeout(ctx, orphanAsk)
			_, err := o.nc.RequestWithContext(actx, subject.FairOwner(owner), nil)
			cancel()
			if !errors.Is(err, nats.ErrNoResponders) {
				delete(suspects, owner)
				continue // there (or not answering: left alone this round)
			}
			if !suspects[owner] {
				suspects[owner] = true // gone, or reconnecting: ask again next scan
				continue
			}
			delete(suspects, owner)
			o.gone.add(owner)
			o.log.Info("an orchestrator holding tasks queued for fairness is gone; taking them over", slog.String("instance", owner), slog.Int("sweeps", len(subjs)))
		}
		if err := o.takeOverSweeps(ctx, subjs); err != nil && firstErr == nil {
			firstErr = err // the other owners' sweeps are still tried
		}
	}
	return firstErr
}

// takeOverSweeps takes over a gone owner's sweeps. One failing does not
// stop the others (under faults it must not hold them back to the next
// scan); several failing say JetStream itself is out of reach, and the
// rest wait for the next scan.
func (o *Orchestrator) takeOverSweeps(ctx context.Context, subjs []string) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var failed atomic.Int32
	var g errgroup.Group
	g.SetLimit(orphanWorkers)
	for _, subj := range subjs {
		g.Go(func() error {
			err := o.takeOverSweep(ctx, subj)
			if err != nil && failed.Add(1) >= sweepFailures {
				stop()
			}
			return err
		})
	}
	return g.Wait()
}

// takeOverSweep looks now at the tasks of the owned sweep whose schedule
// is subj, then replaces the schedule so that it does not fire.
func (o *Orchestrator) takeOverSweep(ctx context.Context, subj string) error {
	msg, err := o.timers.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // fired or taken over meanwhile
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", subj, err)
	}
	if len(msg.Data) == 0 {
		return nil // replaced already
	}
	var f timerFire
	if err := wirejson.Unmarshal(msg.Data, &f); err != nil {
		o.log.Warn("dropping malformed sweep", slog.String("subject", subj), slog.Any("error", err))
		return nil
	}
	if err := o.fireSweep(ctx, f); err != nil {
		return fmt.Errorf("take over %s: %w", subj, err)
	}
	if _, err := o.js.Publish(ctx, subj, nil, jetstream.WithMsgTTL(time.Second)); err != nil {
		return fmt.Errorf("replace %s: %w", subj, err)
	}
	return nil
}
