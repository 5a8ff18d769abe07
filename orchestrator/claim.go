package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/inputs"
	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// Claims. Executors never write task records: the orchestrator is their
// one writer. A first delivery of a dispatch runs on a leader read alone
// (the record still ready under its execution id); the executor's report
// then moves the record from ready to the attempt's outcome. An executor
// asks the orchestrator to mark an attempt running (a compare-and-set, as
// any transition) only when that decides something: it takes over a
// redelivered dispatch (the takeover is counted and checked against a live
// lease), the task has a dispatch timeout (whose re-dispatch must not race
// its start), or the attempt outlives a heartbeat (so operators see it
// running).

const (
	// claimQueue is the queue group the orchestrators answer claims in.
	claimQueue = "ax-orchestrator"
	// claimWorkers answer claims concurrently: each is a leader read and
	// at most one write.
	claimWorkers = 8
	// claimBacklog bounds the claims waiting for a worker; beyond it a
	// claim is dropped and its executor asks again after its timeout.
	claimBacklog = 4096
)

// serveClaims answers claims (ax.claim.<capability>) until ctx ends, in
// one queue group with the other orchestrators (serveRequests).
func (o *Orchestrator) serveClaims(ctx context.Context) error {
	return o.serveRequests(ctx, []string{subject.ClaimAll}, claimWorkers, claimBacklog,
		func(ctx context.Context, r request) { o.answerClaim(ctx, r.m) }, nil)
}

// answerClaim decides one claim and replies.
func (o *Orchestrator) answerClaim(ctx context.Context, m *nats.Msg) {
	var req task.ClaimRequest
	var rep task.ClaimReply
	if err := wirejson.Unmarshal(m.Data, &req); err != nil || req.ID == "" || req.ExecutionID == "" || req.Executor == "" {
		o.log.Warn("ignoring a malformed claim", slog.Any("error", err), slog.String("subject", m.Subject))
		rep = task.ClaimReply{Error: "malformed claim: id, execution_id and executor are required"}
	} else if !o.validToken(req.ID, req.ExecutionID, req.Token) {
		o.log.Warn("refusing a claim without its execution's token (only the executor dispatched the execution may claim it)",
			slog.String("task_id", req.ID), slog.String("execution_id", req.ExecutionID), slog.String("executor", req.Executor))
		rep = task.ClaimReply{Status: task.ClaimEnded, Error: "the claim has no valid execution token: only the executor dispatched an execution may claim it"}
	} else {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rep = o.claim(cctx, subject.CapabilityFromClaim(m.Subject), req)
		cancel()
	}
	data, _ := wirejson.Marshal(rep)
	if err := m.Respond(data); err != nil {
		o.log.Debug("claim reply not sent", slog.Any("error", err))
	}
}

// claim marks req's attempt running on its executor if the record allows:
// ready under the same execution, running on the same executor (a mark
// asked again), or running on an executor whose lease expired and req is a redelivery (a
// takeover, counted). The capability is the claim subject's: an executor
// may only claim tasks of the capabilities it may ask for.
func (o *Orchestrator) claim(ctx context.Context, capability string, req task.ClaimRequest) task.ClaimReply {
	for range maxCASRetries {
		cur, rev, err := o.store.Get(ctx, req.ID)
		if errors.Is(err, store.ErrNotFound) {
			return task.ClaimReply{Status: task.ClaimNotFound}
		}
		if err != nil {
			return task.ClaimReply{Error: err.Error()}
		}
		d := lifecycle.Claim(&cur, rev, capability, &req, o.env())
		switch d.Verdict {
		case lifecycle.Stale:
			return task.ClaimReply{Error: d.Err.Error()}
		case lifecycle.Refuse:
			o.log.Warn("refusing a claim made for another capability", slog.String("task_id", req.ID),
				slog.String("capability", cur.Capability), slog.String("claimed_as", capability), slog.String("executor", req.Executor))
			return task.ClaimReply{Status: d.Status, Error: d.Err.Error()}
		case lifecycle.Replay:
			// The dispatch is the ended execution's effects' last trigger:
			// ensure them (idempotent) before answering, and have the
			// executor ask again if they fail.
			if err := o.ensureEffects(ctx, cur, rev); err != nil {
				return task.ClaimReply{Error: fmt.Sprintf("%s ended; its effects not ensured yet: %v", req.ID, err)}
			}
			return task.ClaimReply{Status: d.Status}
		case lifecycle.Ignore:
			if d.Status == task.ClaimGranted {
				return task.ClaimReply{Status: d.Status, Task: &cur, Revision: rev}
			}
			return task.ClaimReply{Status: d.Status}
		}
		if d.TakeOver {
			held, err := o.leased(ctx, cur)
			if err != nil {
				return task.ClaimReply{Error: err.Error()}
			}
			if held {
				return task.ClaimReply{Status: task.ClaimRunningElsewhere}
			}
		}
		next, reason := d.Next, d.Reason
		newRev, err := o.write(ctx, cur, rev, &next, reason)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return task.ClaimReply{Error: err.Error()}
		}
		if err := o.ensureEffects(ctx, next, newRev); err != nil {
			// The claim stands; the reconciler's watch of the running
			// task is armed again by its next look or by the report.
			o.log.Warn("claim written; its effects not ensured yet", slog.String("task_id", req.ID), slog.Any("error", err))
		}
		return task.ClaimReply{Status: task.ClaimGranted, Task: &next, Revision: newRev}
	}
	return task.ClaimReply{Error: fmt.Sprintf("claim %s: %v", req.ID, consume.ErrContended)}
}

// inputsWorkers answer inputs requests: each is a leader read per upstream.
const inputsWorkers = 4

// serveInputs answers executors' inputs requests (ax.inputs.<capability>)
// until ctx ends, in one queue group with the other orchestrators.
func (o *Orchestrator) serveInputs(ctx context.Context) error {
	return o.serveRequests(ctx, []string{subject.InputsAll}, inputsWorkers, claimBacklog,
		func(ctx context.Context, r request) { o.answerInputs(ctx, r.m) }, nil)
}

// answerInputs reads the inputs of an execution's task: only for the
// holder of its token, and only of a task of the request subject's
// capability (which only that capability's executors may publish on).
func (o *Orchestrator) answerInputs(ctx context.Context, m *nats.Msg) {
	var req task.InputsRequest
	rep := task.InputsReply{}
	switch err := wirejson.Unmarshal(m.Data, &req); {
	case err != nil || req.ID == "" || req.ExecutionID == "":
		rep.Error = "malformed inputs request: id and execution_id are required"
	case !o.validToken(req.ID, req.ExecutionID, req.Token):
		rep.Error = "the inputs request has no valid execution token: only the executor dispatched an execution may read its inputs"
	default:
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t, _, err := o.store.Get(rctx, req.ID)
		switch {
		case err != nil:
			rep.Error = err.Error()
		case t.Capability != subject.CapabilityFromInputs(m.Subject):
			rep.Error = fmt.Sprintf("task %s is of capability %q", req.ID, t.Capability)
		default:
			if rep.Inputs, err = inputs.Read(rctx, o.store, t.DependsOn); err != nil {
				rep.Error = err.Error()
			}
		}
		cancel()
	}
	data, _ := wirejson.Marshal(rep)
	if err := m.Respond(data); err != nil {
		o.log.Debug("inputs reply not sent", slog.Any("error", err))
	}
}
