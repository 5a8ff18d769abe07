package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// execution is a handler run in progress.
type execution struct {
	executionID string
	cancel      context.CancelFunc
	// cancelled: the task was cancelled; its outcome is not reported.
	cancelled atomic.Bool
	// abandoned: the executor is stopping; the task is handed back.
	abandoned atomic.Bool
	// msg is the dispatch; handBack gives it back once.
	msg      jetstream.Msg
	handBack sync.Once
}

// giveBack hands the dispatch back for redelivery (once).
func (ex *execution) giveBack() {
	ex.handBack.Do(func() { _ = ex.msg.Nak() })
}

// start claims and runs a fetched dispatch in its own goroutine, counting
// its cost against capacity until it is done.
func (e *Executor) start(s *session, msg jetstream.Msg) {
	var d task.Dispatch
	if err := json.Unmarshal(msg.Data(), &d); err != nil || d.ID == "" || d.ExecutionID == "" || d.Revision == 0 {
		e.log.Warn("dropping malformed dispatch", "error", err, "subject", msg.Subject())
		_ = msg.Term()
		return
	}
	cost := d.EstimatedCost
	if cost <= 0 {
		cost = task.DefaultEstimatedCost
	}
	if !e.load.admit(cost) {
		// No room for it now: hand it back at once (another executor may
		// take it); this one pauses pulling until it would fit.
		_ = msg.Nak()
		return
	}
	e.metrics.InFlightCostChanged(cost)
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		var once sync.Once
		free := func() {
			once.Do(func() {
				e.load.release(cost)
				e.metrics.InFlightCostChanged(-cost)
			})
		}
		defer free()
		e.execute(s, msg, d, free)
	}()
}

// execute claims a dispatch, runs its handler and reports the outcome. Its
// cost counts against capacity until the handler returns (free); the report
// and the acknowledgement that follow hold one of the executor's report
// slots instead, so a handler's slot goes to the next task while its
// predecessor's outcome is being stored, and the reports in flight are
// bounded all the same.
func (e *Executor) execute(s *session, msg jetstream.Msg, d task.Dispatch, free func()) {
	ctx := context.Background()
	log := e.log.With("task_id", d.ID, "execution_id", d.ExecutionID, "attempt", d.Attempt)
	delivered := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	claimCtx, cancelClaim := context.WithTimeout(ctx, 10*time.Second)
	t, claimedFrom, claimRev, ok, err := e.claim(claimCtx, d, delivered)
	cancelClaim()
	switch {
	case errors.Is(err, errRunningElsewhere):
		// Another executor may be running it (or this is a copy of the
		// dispatch): look again once its lease would have expired.
		log.Debug("running elsewhere; checking again after the ack wait")
		_ = msg.NakWithDelay(e.cfg.AckWait)
		return
	case errors.Is(err, store.ErrNotFound) && delivered >= unknownTaskDeliveries:
		log.Warn("dropping dispatch of an unknown task", "deliveries", delivered)
		_ = msg.Term()
		return
	case errors.Is(err, store.ErrNotFound):
		// Reads go to the stream leader, but a dispatch is work: look again
		// a few times before dropping it.
		log.Warn("dispatch of a task not found; looking again")
		_ = msg.NakWithDelay(500 * time.Millisecond)
		return
	case err != nil:
		log.Warn("claim failed; will retry", "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if !ok {
		_ = msg.Ack() // cancelled, superseded or run elsewhere
		return
	}

	ex := &execution{executionID: t.ExecutionID, msg: msg}
	hctx, cancel := context.WithTimeout(ctx, t.Timeout.Std())
	defer cancel()
	if t.ExpiresAt != nil {
		var cancelDeadline context.CancelFunc
		hctx, cancelDeadline = context.WithDeadline(hctx, *t.ExpiresAt)
		defer cancelDeadline()
	}
	ex.cancel = cancel
	if !e.track(s, t.ID, ex) {
		// Stop gave up on this session between the claim and now.
		ex.giveBack()
		return
	}
	defer e.untrack(s, t.ID, ex)

	stopBeat := e.heartbeat(ex, t)
	var result any
	var plan *task.PlanRef
	var herr error
	if t.Takeovers > e.cfg.MaxTakeovers {
		// Its executors keep dying while running it: do not run it again
		// here; fail the attempt so backoff and the dead-letter queue apply.
		herr = fmt.Errorf("its executor was lost %d times in a row while running it (a crash loop?); not run again", t.Takeovers)
	} else {
		result, plan, herr = e.call(hctx, t, traceParentOf(msg, t))
	}
	finished := e.cfg.Now().UTC()
	// The lease is held until the report is published and acknowledged.
	defer stopBeat()
	e.reporting <- struct{}{}
	defer func() { <-e.reporting }()
	free()

	switch {
	case ex.abandoned.Load():
		log.Info("executor stopping: task handed back")
		ex.giveBack()
		return
	case ex.cancelled.Load():
		log.Info("task cancelled while running")
		_ = msg.Ack()
		return
	}
	if herr != nil && errors.Is(hctx.Err(), context.DeadlineExceeded) {
		if t.ExpiresAt != nil && !finished.Before(*t.ExpiresAt) {
			herr = fmt.Errorf("task deadline %s passed: %w", t.ExpiresAt.Format(time.RFC3339Nano), herr)
		} else {
			herr = fmt.Errorf("execution timed out after %s: %w", t.Timeout.Std(), herr)
		}
	}
	r := task.Report{ID: t.ID, Type: t.Type, ExecutionID: t.ExecutionID, Attempt: t.Attempt,
		Executor: e.cfg.ID, StartedAt: *t.StartedAt, FinishedAt: finished, Status: task.OutcomeSucceeded,
		DispatchRevision: claimedFrom, ClaimRevision: claimRev}
	if herr == nil {
		r.Result, herr = encodeResult(result)
		r.Plan = plan
	}
	if herr == nil && len(r.Result) > task.InlineResultLimit {
		r.ResultObject, herr = e.storeLargeResult(hctx, t, r.Result)
		r.Result = nil
	}
	if herr != nil {
		setOutcome(&r, herr)
	}
	if err := e.report(s.hardStop, r); err != nil {
		log.Warn("report not published; handing the task back", "error", err)
		ex.giveBack()
		return
	}
	e.metrics.AttemptFinished(AttemptMetrics{TaskType: t.Type, Outcome: string(r.Status), Duration: finished.Sub(*t.StartedAt)})
	if ex.abandoned.Load() {
		// Stop gave up and handed the task back while this report was
		// published: the redelivery finds the task done.
		return
	}
	if err := msg.Ack(); err != nil {
		log.Debug("ack failed after report; a redelivery will find the task done", "error", err)
	}
}

// claim moves the task to running, a compare-and-set against the revision
// it was dispatched at. It returns ok=false when the task must not run: it
// was cancelled, superseded by a newer dispatch, or is run by another
// executor. A redelivered dispatch (delivered > 1) takes over a running
// execution: its previous executor stopped heart-beating.
func (e *Executor) claim(ctx context.Context, d task.Dispatch, delivered uint64) (claimed task.Task, from, to uint64, ok bool, err error) {
	cur, rev := d.Task, d.Revision
	for range 20 {
		next := cur.Claimed(e.cfg.ID, e.cfg.Now().UTC())
		if cur.State == task.Running {
			next.Takeovers = cur.Takeovers + 1
			next.Reason = fmt.Sprintf("taken over by %s from %s (delivery %d)", e.cfg.ID, cur.Executor, delivered)
		}
		ev := task.Event{Kind: task.KindTransition, From: cur.State, To: task.Running, At: next.UpdatedAt, Actor: e.cfg.ID, Reason: next.Reason, Task: next}
		newRev, err := e.store.Write(ctx, ev, rev)
		if err == nil {
			return next, rev, newRev, true, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return cur, 0, 0, false, err
		}
		if cur, rev, err = e.store.Get(ctx, d.ID); err != nil {
			return cur, 0, 0, false, err
		}
		switch {
		case cur.ExecutionID != d.ExecutionID:
			return cur, 0, 0, false, nil
		case cur.State == task.Ready:
		case cur.State == task.Running && delivered > 1:
			// A redelivery: its executor stopped heart-beating, unless this
			// is a copy of the dispatch and the executor holds a live lease.
			if held, err := e.leased(ctx, cur.ID, cur.ExecutionID); err != nil || held {
				if err == nil {
					err = errRunningElsewhere
				}
				return cur, 0, 0, false, err
			}
		case cur.State == task.Running:
			return cur, 0, 0, false, errRunningElsewhere
		default:
			return cur, 0, 0, false, nil
		}
	}
	return cur, 0, 0, false, fmt.Errorf("claim %s: too many concurrent changes", d.ID)
}

// call runs the handler (or a shardable task's planner or aggregator),
// turning a panic into an error.
func (e *Executor) call(ctx context.Context, t task.Task, traceParent string) (result any, plan *task.PlanRef, err error) {
	h := e.handler(t.Type)
	if h == nil {
		return nil, nil, fmt.Errorf("no handler for task type %q on executor %s", t.Type, e.cfg.ID)
	}
	payload, err := e.decodePayload(ctx, t) // Config.Codec (codec.go)
	if err != nil {
		return nil, nil, err
	}
	h = e.encodeShards(h)
	job := &Job{ID: t.ID, Type: t.Type, Payload: payload, Priority: t.PriorityLevel(), Capability: t.Capability,
		Attempt: t.Attempt, MaxRetries: t.RetryLimit(), ExecutionID: t.ExecutionID, EstimatedCost: t.EstimatedCost,
		Phase: t.Phase, Parent: t.Parent, ShardIndex: t.ShardIndex, TraceParent: traceParent}
	if t.Shardable && job.Phase == "" {
		job.Phase = task.PhasePlan
	}
	e.bindInputs(job, t)
	err = e.hooked(ctx, job, func(ctx context.Context) error {
		if t.Shardable {
			result, plan, err = e.callSharded(ctx, h, t, job)
			return err
		}
		result, err = h.Handle(ctx, job)
		return err
	})
	return result, plan, err
}

func encodeResult(v any) (json.RawMessage, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if json.Valid(r) {
			return r, nil
		}
	case []byte:
		if json.Valid(r) {
			return r, nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return b, nil
}

// heartbeat extends the dispatch's lease every Heartbeat until the returned
// func is called, and renews the task's lease record (ax.lease.<id>). It
// costs nothing for tasks shorter than one interval.
func (e *Executor) heartbeat(ex *execution, running task.Task) func() {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(e.cfg.Heartbeat, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || ex.abandoned.Load() {
			// Handed back: extending the dispatch now could hold up
			// its redelivery to another executor.
			return
		}
		if err := ex.msg.InProgress(); err != nil {
			e.log.Debug("heartbeat failed", "error", err)
		}
		e.renewLease(running)
		t.Reset(e.cfg.Heartbeat)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// leaseTTL is how long a lease outlives the heartbeat that renewed it:
// longer than the heartbeat interval, shorter than the ack wait, so it is
// gone by the time a dead executor's dispatch is redelivered. Message TTLs
// are whole seconds, at least one.
func (e *Executor) leaseTTL() time.Duration {
	return max(time.Second, ((e.cfg.Heartbeat + e.cfg.AckWait) / 2).Truncate(time.Second))
}

// renewLease records that this executor still runs t.
func (e *Executor) renewLease(t task.Task) {
	data, _ := json.Marshal(task.Lease{ExecutionID: t.ExecutionID, Executor: e.cfg.ID, At: e.cfg.Now().UTC()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, subject.Lease(t.ID), data, jetstream.WithMsgTTL(e.leaseTTL())); err != nil {
		e.log.Debug("lease not renewed", "error", err, "task_id", t.ID)
	}
}

// leased reports whether an executor that is alive holds the lease of an
// execution (its heartbeats keep the record from expiring).
func (e *Executor) leased(ctx context.Context, id, executionID string) (bool, error) {
	msg, err := e.leases.GetLastMsgForSubject(ctx, subject.Lease(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read lease of %s: %w", id, err)
	}
	var l task.Lease
	if err := json.Unmarshal(msg.Data, &l); err != nil {
		return false, nil // unreadable: treat as no lease
	}
	return l.ExecutionID == executionID, nil
}

// unknownTaskDeliveries is the delivery of a dispatch naming a task that
// cannot be found (a leader read) at which the dispatch is dropped.
const unknownTaskDeliveries = 2

// errRunningElsewhere: the task is running under the same execution id on a
// first delivery of its dispatch (a copy, or consumer state lost in a server
// crash); its executor may be alive.
var errRunningElsewhere = errors.New("task is running elsewhere")

// report publishes an attempt's outcome, retrying through NATS outages
// (the lease is kept meanwhile) until it is stored or the executor is
// stopped for good.
func (e *Executor) report(hardStop context.Context, r task.Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0
	return backoff.Retry(func() error {
		if hardStop.Err() != nil {
			return backoff.Permanent(hardStop.Err())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.js.Publish(ctx, subject.Completed(r.Type), data,
			jetstream.WithMsgID("report-"+r.ExecutionID+"-"+e.cfg.ID))
		return err
	}, bo)
}

// track records a running execution in its session; it returns false
// when Stop already gave up on the session's handlers.
func (e *Executor) track(s *session, id string, ex *execution) bool {
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	if s.hardStop.Err() != nil {
		return false
	}
	s.running[id] = ex
	return true
}

func (e *Executor) untrack(s *session, id string, ex *execution) {
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	if s.running[id] == ex {
		delete(s.running, id)
	}
}

// cancelRunning cancels the handler of a task cancelled by the
// orchestrator. The signal is a plain NATS message anyone may publish, so it
// is acted on only when the task's record (read from the stream leader)
// says the execution really ended: cancelled, expired or superseded.
func (e *Executor) cancelRunning(s *session, id string) {
	s.runningMu.Lock()
	ex := s.running[id]
	s.runningMu.Unlock()
	if ex == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t, _, err := e.store.Get(ctx, id)
	switch {
	case err != nil:
		e.log.Warn("cancel signal: cannot read the task; its handler keeps running", "error", err, "task_id", id)
		return
	case t.State != task.Cancelled && t.State != task.Expired && t.ExecutionID == ex.executionID:
		e.log.Warn("ignoring a cancel signal for a task that is not cancelled", "task_id", id, "state", string(t.State))
		return
	}
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	if s.running[id] == ex {
		ex.cancelled.Store(true)
		ex.cancel()
		e.log.Info("cancelling running handler", "task_id", id)
	}
}

// abandonRunning cancels every running handler of a session and hands its
// task back at once, when the executor must stop before they finish.
func (e *Executor) abandonRunning(s *session) {
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	for _, ex := range s.running {
		ex.abandoned.Store(true)
		ex.cancel()
		ex.giveBack()
	}
}
