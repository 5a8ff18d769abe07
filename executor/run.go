package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
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
	// claimRev is the revision of the orchestrator's running record of the
	// attempt (0 until one is written: see Executor.claim).
	claimRev atomic.Uint64
	// unmarked: the orchestrator refused to mark it running (it is no
	// longer this executor's); heartbeats stop asking.
	unmarked atomic.Bool
	// lost: the orchestrator refused a step because the attempt is no
	// longer this executor's (taken over); its outcome is not reported.
	lost atomic.Bool
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
func (e *Executor) start(s *session, msg jetstream.Msg, pulled time.Time) {
	d, dispatcher, err := decodeDispatch(msg)
	if err != nil {
		e.log.Warn("dropping malformed dispatch", "error", err, "subject", msg.Subject())
		_ = msg.Term()
		return
	}
	if e.handler(d.Type) == nil {
		if s.revocations.has(d.ExecutionID) {
			// Cancelled or expired: nobody is to run it (passed on,
			// it would go round for ever).
			_ = msg.Ack()
			return
		}
		e.passOn(msg, d)
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
		e.execute(s, msg, d, dispatcher, free, pulled)
	}()
}

// decodeDispatch reads a dispatch: the ready record of a task, stored on
// its dispatch subject (subject.TaskDispatch), whose stream sequence is
// its revision and whose Ax-Token header is the execution's token. The
// subject must name the record's own capability, priority and type (its
// claim would otherwise go to another capability's subject). dispatcher is
// the node id of the orchestrator that wrote it (its event's actor).
func decodeDispatch(msg jetstream.Msg) (d task.Dispatch, dispatcher string, err error) {
	var ev task.Event
	if err := wirejson.Unmarshal(msg.Data(), &ev); err != nil {
		return task.Dispatch{}, "", err
	}
	md, err := msg.Metadata()
	if err != nil {
		return task.Dispatch{}, "", err
	}
	t := ev.Task
	id, capability, priority, typ, ok := subject.ParseDispatch(msg.Subject())
	switch {
	case t.ID == "" || t.ExecutionID == "" || t.State != task.Ready:
		return task.Dispatch{}, "", errors.New("not a ready record with an execution id")
	case !ok || id != t.ID || capability != t.Capability || priority != t.PriorityLevel() || typ != t.Type:
		return task.Dispatch{}, "", fmt.Errorf("its subject does not name its task %s (capability %s, priority %d, type %s)", t.ID, t.Capability, t.PriorityLevel(), t.Type)
	}
	var token string
	if h := msg.Headers(); h != nil {
		token = h.Get(subject.HeaderToken)
	}
	t.DispatchRevision = md.Sequence.Stream
	return task.Dispatch{Task: t, Revision: md.Sequence.Stream, Token: token}, ev.Actor, nil
}

// execute claims a dispatch, runs its handler and reports the outcome. Its
// cost counts against capacity until the handler returns (free); the report
// and the acknowledgement that follow hold one of the executor's report
// slots instead, so a handler's slot goes to the next task while its
// predecessor's outcome is being stored, and the reports in flight are
// bounded all the same.
//
// pulled is when the pull that delivered msg was sent: a dispatch held
// for half the ack wait or more before it could start (the process was
// stopped, swapped out, starved of CPU) may have been delivered again to
// another executor meanwhile, which runs it (a first delivery runs without
// asking anyone, and a claim of the redelivery finds no lease yet). It is
// neither run nor answered (an acknowledgement or a hand-back would act on
// the newer delivery): if it is still the current delivery, it comes again
// after the ack wait, as a redelivery that is claimed first. Checked again
// once claimed, just before the handler starts. Pulls wait at
// most bellWait, so a dispatch that did not wait is never taken for one.
func (e *Executor) execute(s *session, msg jetstream.Msg, d task.Dispatch, dispatcher string, free func(), pulled time.Time) {
	ctx := context.Background()
	// Built when something is logged: With allocates, and most tasks log nothing.
	log := func() *slog.Logger {
		return e.log.With("task_id", d.ID, "execution_id", d.ExecutionID, "attempt", d.Attempt)
	}
	delivered := uint64(1)
	if md, err := msg.Metadata(); err == nil {
		delivered = md.NumDelivered
	}
	if s.revocations.has(d.ExecutionID) {
		// Cancelled or expired while its dispatch waited.
		log().Debug("dispatch of a revoked execution: not run")
		_ = msg.Ack()
		return
	}
	heldTooLong := func(at string) bool {
		if e.stall != nil {
			e.stall(at)
		}
		held := time.Since(pulled)
		if held < e.cfg.AckWait/2 {
			return false
		}
		log().Info("dispatch held for half its ack wait before it could start: left to its redelivery", "held", held,
			"deliveries", delivered, "at", at)
		return true
	}
	if heldTooLong("pulled") {
		return
	}
	claimCtx, cancelClaim := context.WithTimeout(ctx, 10*time.Second)
	t, claimRev, ok, err := e.claim(claimCtx, d, delivered)
	cancelClaim()
	switch {
	case errors.Is(err, errRunningElsewhere):
		// Another executor may be running it (or this is a copy of the
		// dispatch): look again once its lease would have expired.
		log().Debug("running elsewhere; checking again after the ack wait")
		_ = msg.NakWithDelay(e.cfg.AckWait)
		return
	case errors.Is(err, store.ErrNotFound) && delivered >= unknownTaskDeliveries:
		log().Warn("dropping dispatch of an unknown task", "deliveries", delivered)
		_ = msg.Term()
		return
	case errors.Is(err, store.ErrNotFound):
		// Reads go to the stream leader, but a dispatch is work: look again
		// a few times before dropping it.
		log().Warn("dispatch of a task not found; looking again")
		_ = msg.NakWithDelay(500 * time.Millisecond)
		return
	case err != nil:
		log().Warn("claim failed; will retry", "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if !ok {
		_ = msg.Ack() // cancelled, superseded or run elsewhere
		return
	}
	if heldTooLong("claimed") {
		// The claim (or the stall after it) took that long: a claim
		// granted now names this executor running without a lease yet,
		// so the redelivery's claim takes the attempt over.
		return
	}

	ex := &execution{executionID: t.ExecutionID, msg: msg}
	ex.claimRev.Store(claimRev)
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
	if s.revocations.has(t.ExecutionID) {
		// Revoked between the check above and now: cancelRunning found
		// nothing to cancel then.
		e.cancelRunning(s, t.ID, t.ExecutionID)
	}

	steps := newJobSteps(e, t, task.Report{ID: t.ID, Type: t.Type, ExecutionID: t.ExecutionID, Attempt: t.Attempt,
		Executor: e.cfg.ID, StartedAt: *t.StartedAt, DispatchRevision: d.Revision, Token: d.Token, Takeovers: t.Takeovers},
		ex.claimRev.Load, func() { ex.lost.Store(true); cancel() })
	stopBeat := e.heartbeat(ex, t, d, delivered)
	var result any
	var plan *task.PlanRef
	var herr error
	if t.Takeovers > e.cfg.MaxTakeovers {
		// Its executors keep dying while running it: do not run it again
		// here; fail the attempt so backoff and the dead-letter queue apply.
		herr = fmt.Errorf("its executor was lost %d times in a row while running it (a crash loop?); not run again", t.Takeovers)
	} else {
		result, plan, herr = e.call(hctx, t, d.Token, traceParentOf(msg, t), steps)
	}
	finished := e.cfg.Now().UTC()
	// The lease is held until the report is published and acknowledged.
	defer stopBeat()
	e.reporting <- struct{}{}
	defer func() { <-e.reporting }()
	free()

	switch {
	case ex.abandoned.Load():
		log().Info("executor stopping: task handed back")
		ex.giveBack()
		return
	case ex.cancelled.Load():
		log().Info("task cancelled while running")
		_ = msg.Ack()
		return
	case ex.lost.Load():
		// Taken over: the dispatch's delivery, and the outcome, are the
		// executor's that runs the attempt now.
		log().Info("the attempt is no longer this executor's (a step was refused): outcome not reported")
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
		DispatchRevision: d.Revision, ClaimRevision: ex.claimRev.Load(), Token: d.Token,
		StepRevision: steps.stepRevision(), Takeovers: t.Takeovers}
	if herr == nil {
		r.Result, herr = encodeResult(result)
		r.Plan = plan
	}
	if herr == nil && len(r.Result) > task.InlineResultLimit {
		herr = e.storeLargeResult(hctx, t, &r)
	}
	if herr != nil {
		setOutcome(&r, herr)
	}
	// Counted before the report is stored, so the count never trails the
	// task's end as its producer sees it.
	e.metrics.AttemptFinished(AttemptMetrics{TaskType: t.Type, Outcome: string(r.Status), Duration: finished.Sub(*t.StartedAt)})
	if err := e.report(s, r, dispatcher); err != nil {
		log().Warn("report not published; handing the task back", "error", err)
		ex.giveBack()
		return
	}
	if ex.abandoned.Load() {
		// Stop gave up and handed the task back while this report was
		// published: the redelivery finds the task done.
		return
	}
	if err := msg.Ack(); err != nil {
		log().Debug("ack failed after report; a redelivery will find the task done", "error", err)
	}
}

// claim decides whether this executor runs a dispatch. Executors never
// write task records (the orchestrator is their one writer), nor read them:
// a first delivery runs at once — the dispatch is the ready record itself,
// and the orchestrator withdraws the dispatch of an execution it cancels
// or supersedes while it waits, so a dispatch delivered is one to run. A
// redelivery, which may take over an execution whose executor died, and a
// task with a dispatch timeout, whose re-dispatch must not race its start,
// ask the orchestrator to claim it (askClaim, ax.claim.<capability>). It returns
// ok=false when the task must not run, and the revision of the
// orchestrator's running record (0 if none).
func (e *Executor) claim(ctx context.Context, d task.Dispatch, delivered uint64) (claimed task.Task, claimRev uint64, ok bool, err error) {
	if delivered > 1 || d.DispatchTimeout > 0 {
		return e.askClaim(ctx, task.ClaimRequest{ID: d.ID, ExecutionID: d.ExecutionID, Revision: d.Revision,
			Executor: e.cfg.ID, StartedAt: e.cfg.Now().UTC(), Delivered: delivered, Token: d.Token}, d.Capability)
	}
	return d.Claimed(e.cfg.ID, e.cfg.Now().UTC()), 0, true, nil
}

// askClaim sends a claim request for a task of a capability and reads the
// answer: the running record when it is granted.
func (e *Executor) askClaim(ctx context.Context, req task.ClaimRequest, capability string) (task.Task, uint64, bool, error) {
	data, err := wirejson.Marshal(req)
	if err != nil {
		return task.Task{}, 0, false, fmt.Errorf("encode claim of %s: %w", req.ID, err)
	}
	msg, err := e.nc.RequestWithContext(ctx, subject.Claim(capability), data)
	if err != nil {
		return task.Task{}, 0, false, fmt.Errorf("claim %s: %w", req.ID, err)
	}
	var rep task.ClaimReply
	if err := wirejson.Unmarshal(msg.Data, &rep); err != nil {
		return task.Task{}, 0, false, fmt.Errorf("claim %s: unreadable reply: %w", req.ID, err)
	}
	switch {
	case rep.Error != "" && rep.Status != task.ClaimEnded:
		return task.Task{}, 0, false, fmt.Errorf("claim %s: %s", req.ID, rep.Error)
	case rep.Status == task.ClaimGranted && rep.Task != nil:
		return *rep.Task, rep.Revision, true, nil
	case rep.Status == task.ClaimRunningElsewhere:
		return task.Task{}, 0, false, errRunningElsewhere
	case rep.Status == task.ClaimNotFound:
		return task.Task{}, 0, false, fmt.Errorf("claim %s: %w", req.ID, store.ErrNotFound)
	case rep.Status == task.ClaimEnded:
		if rep.Error != "" {
			e.log.Warn("claim refused", "task_id", req.ID, "reason", rep.Error)
		}
		return task.Task{}, 0, false, nil
	}
	return task.Task{}, 0, false, fmt.Errorf("claim %s: unexpected reply %q", req.ID, rep.Status)
}

// call runs the handler (or a shardable task's planner or aggregator),
// turning a panic into an error.
func (e *Executor) call(ctx context.Context, t task.Task, token, traceParent string, steps *jobSteps) (result any, plan *task.PlanRef, err error) {
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
		Phase: t.Phase, Parent: t.Parent, ShardIndex: t.ShardIndex, TraceParent: traceParent, steps: steps}
	if t.Shardable && job.Phase == "" {
		job.Phase = task.PhasePlan
	}
	e.bindInputs(job, t, token)
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

// beat is what an execution's heartbeat needs of it, kept while its report
// is in flight: the claim it may still ask for and its lease's subject, not
// the task and its dispatch (a closure over those held both records per
// report in flight).
type beat struct {
	claim      task.ClaimRequest
	capability string
}

// heartbeat extends the dispatch's lease every Heartbeat until the returned
// func is called, renews the task's lease record (ax.lease.<capability>.<id>), and has
// the orchestrator mark the attempt running if nothing did yet. It costs
// nothing for tasks shorter than one interval.
func (e *Executor) heartbeat(ex *execution, running task.Task, d task.Dispatch, delivered uint64) func() {
	b := &beat{capability: d.Capability, claim: task.ClaimRequest{ID: d.ID, ExecutionID: d.ExecutionID,
		Revision: d.Revision, Executor: e.cfg.ID, StartedAt: *running.StartedAt, Delivered: delivered,
		Mark: true, Token: d.Token}}
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
		e.renewLease(b)
		if ex.claimRev.Load() == 0 && !ex.unmarked.Load() {
			e.markRunning(ex, b)
		}
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

// markRunning asks the orchestrator to mark an attempt that outlives a
// heartbeat running, so operators see where it runs; until that succeeds
// each heartbeat asks again.
func (e *Executor) markRunning(ex *execution, b *beat) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, rev, ok, err := e.askClaim(ctx, b.claim, b.capability)
	switch {
	case err != nil:
		e.log.Debug("running mark not made; asking again at the next heartbeat", "task_id", b.claim.ID, "error", err)
	case ok:
		ex.claimRev.Store(rev)
	default:
		// Taken over, cancelled or superseded meanwhile: the cancel
		// signal, or the report being ignored, settles it.
		e.log.Info("running mark refused: the attempt is no longer this executor's", "task_id", b.claim.ID)
		ex.unmarked.Store(true)
	}
}

// leaseTTL is how long a lease outlives the heartbeat that renewed it:
// longer than the heartbeat interval, shorter than the ack wait, so it is
// gone by the time a dead executor's dispatch is redelivered. Message TTLs
// are whole seconds, at least one.
func (e *Executor) leaseTTL() time.Duration {
	return max(time.Second, ((e.cfg.Heartbeat + e.cfg.AckWait) / 2).Truncate(time.Second))
}

// renewLease records that this executor still runs b's execution.
func (e *Executor) renewLease(b *beat) {
	data, _ := wirejson.Marshal(task.Lease{ExecutionID: b.claim.ExecutionID, Executor: e.cfg.ID, At: e.cfg.Now().UTC(), Token: b.claim.Token})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := e.js.Publish(ctx, subject.Lease(b.capability, b.claim.ID), data, jetstream.WithMsgTTL(e.leaseTTL())); err != nil {
		e.log.Debug("lease not renewed", "error", err, "task_id", b.claim.ID)
	}
}

// unknownTaskDeliveries is the delivery of a dispatch naming a task that
// cannot be found (a leader read) at which the dispatch is dropped.
const unknownTaskDeliveries = 2

// errRunningElsewhere: the task is running under the same execution id on a
// first delivery of its dispatch (a copy, or consumer state lost in a server
// crash); its executor may be alive.
var errRunningElsewhere = errors.New("task is running elsewhere")

// report hands an attempt's outcome to the orchestrator: directly (a
// request an orchestrator answers once it applied the report: first the
// one that dispatched it, dispatcher, which has the task's record in
// memory; when it is gone, any), or else
// stored on task.completed.<type>, retrying through NATS outages (the lease
// is kept meanwhile) until it is stored or the executor is stopped for
// good; a stored report is then sent directly again for a while
// (resendStored).
func (e *Executor) report(s *session, r task.Report, dispatcher string) error {
	data, err := wirejson.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if e.reports.SendTo(s.hardStop, dispatcherNode(dispatcher), subject.Completed(r.Type), data) {
		return nil
	}
	e.log.Debug("direct report not applied; storing it", "task_id", r.ID)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0
	err = backoff.Retry(func() error {
		if s.hardStop.Err() != nil {
			return backoff.Permanent(s.hardStop.Err())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := e.js.Publish(ctx, subject.Completed(r.Type), data,
			jetstream.WithMsgID("report-"+r.ExecutionID+"-"+e.cfg.ID))
		return err
	}, backoff.WithContext(bo, s.hardStop)) // a stop for good ends the wait between tries too
	if err == nil {
		e.resendStored(s, r, dispatcher, data)
	}
	return err
}

func dispatcherNode(dispatcher string) string {
	if dispatcher == "" {
		return ""
	}
	return subject.NodeToken(dispatcher)
}

// Resending stored reports. A report is stored when no orchestrator applied
// it directly: they were gone, or could not write its task (AX_TASKS
// without a leader). The orchestrators then apply it from their
// ax-orchestrator-completed consumer, which may itself be without a leader
// for an election or longer once AX_TASKS is back (a chaos run's longest
// stall, 14 s). So the executor also sends it directly again, every
// resendEvery for resendFor, until an orchestrator answers that it applied
// it. Applying a report twice is harmless (the second finds the attempt
// ended), as when a direct answer is lost.
const (
	resendEvery = 2 * time.Second
	resendFor   = 30 * time.Second
)

// resendStored sends a stored report directly again (above), in the
// background, until applied, resendFor passed or the session stops.
func (e *Executor) resendStored(s *session, r task.Report, dispatcher string, data []byte) {
	s.resends.Add(1)
	go func() {
		defer s.resends.Done()
		tick := time.NewTicker(resendEvery)
		defer tick.Stop()
		for range resendFor / resendEvery {
			select {
			case <-s.live.Done():
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(s.live, resendEvery)
			applied := e.reports.SendTo(ctx, dispatcherNode(dispatcher), subject.Completed(r.Type), data)
			cancel()
			if applied {
				e.log.Debug("stored report applied directly", "task_id", r.ID, "execution_id", r.ExecutionID)
				return
			}
		}
	}()
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

// cancelRunning cancels the handler of a task's revoked execution, if it
// runs here: its outcome is not reported.
func (e *Executor) cancelRunning(s *session, id, executionID string) {
	s.runningMu.Lock()
	defer s.runningMu.Unlock()
	if ex := s.running[id]; ex != nil && ex.executionID == executionID {
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
