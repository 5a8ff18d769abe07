package task

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// Task is the orchestrator's record of a task: its spec plus where it is.
// Every version of it is stored as the snapshot inside an Event.
type Task struct {
	Spec

	// State is where the task is; see Transitions for its moves.
	State State `json:"state"`
	// Attempt is the 1-based number of the current (or last) attempt in the
	// current attempt series; 0 before the first dispatch.
	Attempt int `json:"attempt"`
	// ExecutionID identifies the current dispatch; results carrying another
	// execution id are ignored.
	ExecutionID string `json:"execution_id,omitempty"`
	// Executor is the executor that claimed the current execution.
	Executor string `json:"executor,omitempty"`
	// HasDependents says some task listed this one in depends_on. The
	// dependents themselves are edges outside the record (the AX_EDGES
	// stream), so the record's size does not grow with its fan-out.
	HasDependents bool `json:"has_dependents,omitempty"`
	// Dependents lists the tasks that depend on this one in a record read
	// through sdk.Client.Get, which fills it from the edges. The
	// orchestrator never stores it (records stored before edges moved out of
	// them may still carry it, and are honoured).
	Dependents []string `json:"dependents,omitempty"`
	// Errors holds the last KeepAttempts failed attempts of the current
	// series (the task's events hold every one).
	Errors []AttemptError `json:"errors,omitempty"`
	// Result is the handler's result once succeeded.
	Result json.RawMessage `json:"result,omitempty"`
	// Reason explains the current state (why cancelled, failed, retrying…).
	Reason string `json:"reason,omitempty"`
	// RetryAt is when a retrying task becomes ready again.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// Redrives counts how often the task was re-driven from the dead-letter queue.
	Redrives int `json:"redrives,omitempty"`
	// StartAt is when a delayed task may become ready (from delay or run_at).
	StartAt *time.Time `json:"start_at,omitempty"`
	// ExpiresAt is when an unfinished task expires (from deadline or ttl).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Dispatches counts the dispatches of the current attempt.
	Dispatches int `json:"dispatches,omitempty"`
	// Takeovers counts how often the current attempt was taken over after
	// its executor stopped heart-beating.
	Takeovers int `json:"takeovers,omitempty"`
	// ResultObject names the result in the object store ResultBucket when
	// it was larger than InlineResultLimit (Result is then empty).
	ResultObject string `json:"result_object,omitempty"`
	// ResultBucket is the object store holding ResultObject: the task's
	// capability's, AX_OBJECTS_<capability>; empty for the legacy
	// AX_OBJECTS (records written before per-capability stores).
	ResultBucket string `json:"result_bucket,omitempty"`
	// ResultDigest is ResultObject's SHA-256 as its executor reported it
	// ("SHA-256=<base64url>"); readers refuse bytes that do not match.
	// Empty in records written before digests (read unchecked).
	ResultDigest string `json:"result_digest,omitempty"`
	// DispatchRevision is, for a ready task whose current execution was
	// dispatched, the revision of its dispatch: the message on
	// ax.task.<id>.d.… that executors of its capability consume (0 while the
	// execution waits for admission, and in states other than ready and
	// running). Not stored in the dispatch itself (its revision is its own
	// stream sequence); later events of the same execution carry it.
	DispatchRevision uint64 `json:"dispatch_revision,omitempty"`
	// TraceParent is the W3C traceparent of the task's trace (its
	// submission's span), so its dispatches and attempts join that trace.
	TraceParent string `json:"trace_parent,omitempty"`
	// CancelledBy is the upstream whose end cancelled the task (under the
	// trigger rule all_succeeded); a re-drive of that upstream with its
	// dependents re-opens the task.
	CancelledBy string `json:"cancelled_by,omitempty"`
	// DuplicateOf names the task that held the spec's unique_key when
	// this one was submitted: this one was created cancelled and never ran.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Approval is an operator's approval or rejection of an event task
	// (see Approval): set when one ended it.
	Approval *Approval `json:"approval,omitempty"`
	// Snoozes counts the snoozes of the current attempt series (at most
	// MaxSnoozes; a re-drive resets it).
	Snoozes int `json:"snoozes,omitempty"`
	// Snoozed is set while the task is retrying after a snooze: Attempt is
	// then the attempt before the snoozed one, which runs again under its
	// own number.
	Snoozed bool `json:"snoozed,omitempty"`
	// Steps are the durable steps its handler stored (executor.Job.Step)
	// and its durable sleeps (executor.Job.Sleep), in the order stored.
	// They outlive attempts and re-drives: a later attempt returns a
	// stored step's result instead of running it.
	Steps []Step `json:"steps,omitempty"`

	// Phase is a shardable task's step: plan, shards or aggregate.
	Phase string `json:"phase,omitempty"`
	// Sharding is a shardable task's plan and fan-out state.
	Sharding *Sharding `json:"sharding,omitempty"`
	// Parent is the sharded task a shard belongs to; ShardIndex its place
	// in the parent's plan.
	Parent     string `json:"parent,omitempty"`
	ShardIndex int    `json:"shard_index,omitempty"`
	// Parked marks a shard waiting for a free slot under its parent's
	// max_parallel_shards.
	Parked bool `json:"parked,omitempty"`

	// SubmittedAt is when the orchestrator accepted the task.
	SubmittedAt time.Time `json:"submitted_at"`
	// EventWaitSince is when an event task (Spec.WaitFor) registered its
	// wait: from then on it is waiting for its event, not for its
	// dependencies or start time.
	EventWaitSince *time.Time `json:"event_wait_since,omitempty"`
	// EventSeq is the AX_EVENTS sequence of the event an event task
	// received (its data is the Result).
	EventSeq uint64 `json:"event_seq,omitempty"`
	// CancelOnAfter is, for a task with Spec.CancelOn, the last sequence
	// of AX_EVENTS when the orchestrator accepted it: only an event stored
	// after it (a greater sequence) cancels the task.
	CancelOnAfter uint64 `json:"cancel_on_after,omitempty"`
	// ReadyAt is when the task was last made ready (dispatched).
	ReadyAt *time.Time `json:"ready_at,omitempty"`
	// StartedAt is when an executor claimed the current (or last) attempt.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// FinishedAt is when the task reached a terminal state.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// UpdatedAt is the time of the task's latest event.
	UpdatedAt time.Time `json:"updated_at"`
}

// KeepAttempts is how many failed attempts a record keeps: enough to see
// what went wrong lately, while the record stays the same size however
// often a task is retried. Each failure's event keeps its error.
const KeepAttempts = 5

// AddError records a failed attempt, keeping the last KeepAttempts.
func (t *Task) AddError(e AttemptError) {
	e.Error = TruncateError(e.Error)
	errs := append(t.Errors[:len(t.Errors):len(t.Errors)], e) // never shares a caller's array
	if n := len(errs); n > KeepAttempts {
		errs = errs[n-KeepAttempts:]
	}
	t.Errors = errs
}

// AttemptError records one failed attempt.
type AttemptError struct {
	// Attempt is the attempt's 1-based number in its series.
	Attempt int `json:"attempt"`
	// ExecutionID identifies the dispatch that failed.
	ExecutionID string `json:"execution_id"`
	// Executor is the executor that ran it, if one did.
	Executor string `json:"executor,omitempty"`
	// Error is the failure, at most MaxErrorBytes.
	Error string `json:"error"`
	// At is when the failure was recorded.
	At time.Time `json:"at"`
}

// EventKind says what an Event records.
type EventKind string

const (
	// KindTransition is a state change (from → to).
	KindTransition EventKind = "transition"
	// KindDependentAdded records that the task has dependents (once; the
	// edges themselves are in AX_EDGES); the state does not change.
	KindDependentAdded EventKind = "dependent_added"
	// KindShardsRegistered records that every shard of a sharded task exists.
	KindShardsRegistered EventKind = "shards_registered"
	// KindMigrated starts a task's history on the current layout of task
	// histories (`ax migrate tasks`) with its state as an earlier version
	// recorded it on its legacy subject (from = to: that state, or ready
	// for a task dispatched again by the migration).
	KindMigrated EventKind = "migrated"
)

// Event is one entry of a task's history on ax.task.<id>: what happened and
// the task's full record after it. The event's stream sequence is the task's
// revision, the value compare-and-set writes are checked against.
type Event struct {
	// Kind says what the event records.
	Kind EventKind `json:"kind"`
	// From is the state before the event ("" when the task was created);
	// To the state after it (the same for an event that is no move).
	From State `json:"from,omitempty"`
	To   State `json:"to"`
	// At is when the event was written.
	At time.Time `json:"at"`
	// Actor is who wrote it: an orchestrator's node id, or the id of the
	// executor that claimed the task.
	Actor string `json:"actor"`
	// Reason explains the event (why cancelled, failed, retrying…).
	Reason string `json:"reason,omitempty"`
	// Task is the full record after the event.
	Task Task `json:"task"`
}

// Dispatch is a dispatch as an executor reads it (the message on
// ax.task.<id>.d.<capability>.p<N>.<type>): the task record at the
// revision it was dispatched, with its execution id and attempt.
type Dispatch struct {
	Task
	// Revision is the task's revision when it was dispatched: a record read
	// at an older revision is stale (a replica or leader that is behind).
	Revision uint64 `json:"revision"`
	// Token proves that its holder received this dispatch: the execution's
	// report, claims and lease carry it back, and the orchestrator acts on
	// none without it (internal/exectoken). It is not part of the record.
	Token string `json:"token,omitempty"`
}

// EndsAttempt reports whether the event ends an execution attempt: a move
// out of running, or out of ready by the report of an attempt that ended
// before anything marked it running (its record then carries StartedAt).
func (ev Event) EndsAttempt() bool {
	if ev.Kind != KindTransition || ev.To == Running {
		return false
	}
	return ev.From == Running || (ev.From == Ready && ev.To != Ready && ev.Task.StartedAt != nil)
}

// Claimed returns t as claimed by an executor at a time: the running
// record the orchestrator writes for an attempt that outlives a heartbeat,
// is taken over, or has a dispatch timeout.
func (t Task) Claimed(executor string, at time.Time) Task {
	t.State = Running
	t.Executor = executor
	t.StartedAt = &at
	t.DispatchRevision = 0 // delivered: nothing of it is queued any more
	t.UpdatedAt = at
	t.Reason = "claimed by " + executor
	return t
}

// Outcome is what an attempt ended with.
type Outcome string

// The outcomes of an attempt.
const (
	// OutcomeSucceeded: the handler returned a result.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the handler returned an error (or panicked, or timed out).
	OutcomeFailed Outcome = "failed"
	// OutcomeSnoozed asks for the same attempt again after RetryAfter,
	// without counting a failure (up to MaxSnoozes per attempt series).
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeCancelled ends the task cancelled at its handler's request.
	OutcomeCancelled Outcome = "cancelled"
)

// MaxSnoozes bounds the snoozes of one attempt series: a snooze beyond it
// is a failed attempt (counted against max_retries), so a handler that
// always snoozes cannot keep a task alive for ever.
const MaxSnoozes = 100

// Report is what an executor publishes on task.completed.<type>.
type Report struct {
	// ID is the task's id; Type its type.
	ID   string `json:"id"`
	Type string `json:"type"`
	// ExecutionID is the dispatch the attempt ran under; a report of
	// another execution than the task's current one is ignored.
	ExecutionID string `json:"execution_id"`
	// Attempt is the attempt's number.
	Attempt int `json:"attempt"`
	// Status is the attempt's outcome.
	Status Outcome `json:"status"`
	// Error is why a failed attempt failed.
	Error string `json:"error,omitempty"`
	// Result is a succeeded attempt's result (at most InlineResultLimit).
	Result json.RawMessage `json:"result,omitempty"`
	// Executor is the executor that ran the attempt.
	Executor string `json:"executor"`
	// StartedAt and FinishedAt bound the handler's run.
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// DispatchRevision is the task's revision when it was dispatched, and
	// ClaimRevision its revision after the orchestrator marked the attempt
	// running (0 when nothing did). The orchestrator uses them to skip
	// reading the task back and to recognise a stale read; they are hints,
	// checked by CAS.
	DispatchRevision uint64 `json:"dispatch_revision,omitempty"`
	ClaimRevision    uint64 `json:"claim_revision,omitempty"`
	// Permanent asks for no retry of a failure.
	Permanent bool `json:"permanent,omitempty"`
	// RetryAfter asks for the next attempt after this delay instead of the
	// backoff; for a snooze it is the snooze's delay.
	RetryAfter *Duration `json:"retry_after,omitempty"`
	// ResultObject names a result larger than InlineResultLimit in the
	// object store ResultBucket (Result is then empty): it must be
	// ResultObjectName(ID, ExecutionID).
	ResultObject string `json:"result_object,omitempty"`
	// ResultBucket is the object store the executor wrote ResultObject to:
	// that of the task's capability (subject.ObjectBucket). Empty: the
	// legacy AX_OBJECTS (an executor from before per-capability stores).
	ResultBucket string `json:"result_bucket,omitempty"`
	// ResultDigest is ResultObject's SHA-256 ("SHA-256=<base64url>"),
	// required with a ResultBucket.
	ResultDigest string `json:"result_digest,omitempty"`
	// Plan is a planner's outcome: where its list of shards is stored.
	Plan *PlanRef `json:"plan,omitempty"`
	// Token is the execution's dispatch token (Dispatch.Token).
	Token string `json:"token,omitempty"`
	// Step names the step to store (status OutcomeStep, its result in
	// Result or ResultObject) or the sleep to begin (OutcomeSleeping).
	Step string `json:"step,omitempty"`
	// Takeovers is the record's takeovers as the attempt's executor holds
	// it (its dispatch's, or its claim's): a step is stored only for the
	// executor running the attempt now, and one taken over since is
	// refused.
	Takeovers int `json:"takeovers,omitempty"`
	// StepRevision is the task's revision after this attempt's last step
	// was stored (0 if none): a read older than it is stale.
	StepRevision uint64 `json:"step_revision,omitempty"`
}

// DeadLetter is the entry on ax.dlq.<id> for a task that failed for good.
type DeadLetter struct {
	// Spec is the failed task's spec, to re-drive it.
	Spec Spec `json:"spec"`
	// Attempts are the failed attempts the record kept.
	Attempts []AttemptError `json:"attempts"`
	// Reason is why the task failed.
	Reason string `json:"reason"`
	// FailedAt is when it failed.
	FailedAt time.Time `json:"failed_at"`
	// Redrives counts the re-drives before this failure.
	Redrives int `json:"redrives"`
}

// Rejection is the record on ax.rejected.<id> for a submission that was refused.
type Rejection struct {
	// ID is the refused task's id, when the submission had a readable one.
	ID string `json:"id,omitempty"`
	// Subject is the subject the submission arrived on.
	Subject string `json:"subject"`
	// Reason is why it was refused, naming the field at fault.
	Reason string `json:"reason"`
	// Input is the submission's body (truncated when large).
	Input string `json:"input"`
	// RejectedAt is when it was refused.
	RejectedAt time.Time `json:"rejected_at"`
}

// Graph is a set of specs submitted together on task.graph.submit; edges
// (depends_on) may point inside the graph or at existing tasks.
type Graph struct {
	// Tasks are the graph's specs, in any order.
	Tasks []Spec `json:"tasks"`
}

// CommandRequest is the body of an ax.cmd.<kind>.<id> message.
type CommandRequest struct {
	// Reason is recorded in the audit trail.
	Reason string `json:"reason,omitempty"`
	// RetriesOnly, on a pause, holds retries but lets new tasks through.
	RetriesOnly bool `json:"retries_only,omitempty"`
	// WithDependents, on a re-drive, re-opens the dependents the task's
	// failure cancelled (and theirs), under the same ids.
	WithDependents bool `json:"with_dependents,omitempty"`
	// By names who asked (an operator), recorded in the histories the
	// command writes.
	By string `json:"by,omitempty"`
	// Limit is the limit a limit-set command stores.
	Limit *KeyLimit `json:"limit,omitempty"`
}

// Pause is a pause switch in the control bucket (pause.all, pause.type.<type>).
type Pause struct {
	// RetriesOnly holds retries but lets new tasks through.
	RetriesOnly bool `json:"retries_only,omitempty"`
	// Reason is the operator's reason.
	Reason string `json:"reason,omitempty"`
	// At is when the pause began.
	At time.Time `json:"at"`
}

// AuditEvent is a change that is not about one task, on ax.audit.<kind>.<key>.
type AuditEvent struct {
	Kind string `json:"kind"` // "breaker" or "pause"
	Key  string `json:"key"`  // task type, or "all"
	// From and To are the switch's state before and after (a breaker's
	// closed, open or half_open; a pause's running, paused or "retries
	// paused").
	From string `json:"from"`
	To   string `json:"to"`
	// At is when it changed.
	At time.Time `json:"at"`
	// Actor is the node id of the orchestrator that recorded it.
	Actor string `json:"actor"`
	// Reason explains the change.
	Reason string `json:"reason,omitempty"`
}

// Lease is the body of ax.lease.<capability>.<id>: the executor running an execution
// of the task, renewed at every heartbeat and expiring (message TTL) when
// the executor stops heart-beating.
type Lease struct {
	// ExecutionID is the execution the lease holds.
	ExecutionID string `json:"execution_id"`
	// Executor is the executor running it.
	Executor string `json:"executor"`
	// At is the heartbeat that renewed it last.
	At time.Time `json:"at"`
	// Token is the execution's dispatch token (Dispatch.Token): a lease
	// without it holds nothing.
	Token string `json:"token,omitempty"`
}

// ClaimRequest is what an executor asks the orchestrator on
// ax.claim.<capability> (a request with a reply): to mark an attempt it runs
// as running. Executors never write task records; the orchestrator, their
// one writer, makes the claim a compare-and-set on the record. An executor
// asks when it takes over a redelivered dispatch, starts a task that has a
// dispatch timeout, or its attempt outlives a heartbeat.
type ClaimRequest struct {
	// ID, ExecutionID and Revision name the dispatch (Dispatch.Revision).
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id"`
	Revision    uint64 `json:"revision"`
	// Executor is the executor asking; StartedAt when its handler started
	// (or starts, for a claim before the start).
	Executor  string    `json:"executor"`
	StartedAt time.Time `json:"started_at"`
	// Delivered is the dispatch's delivery count: a redelivery (> 1) may
	// take over an execution whose executor stopped heart-beating.
	Delivered uint64 `json:"delivered"`
	// Mark says the attempt already runs on this executor (it outlived a
	// heartbeat): granted again if the record says so already. Without
	// it the claim is for a start, and a running record is another run's.
	Mark bool `json:"mark,omitempty"`
	// Token is the execution's dispatch token (Dispatch.Token).
	Token string `json:"token,omitempty"`
}

// Revocation is an AX_REVOKED value: the execution of a task that no
// longer runs (cancelled or expired), which executors must not run, or
// must stop.
type Revocation struct {
	// ID and ExecutionID name the execution.
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id"`
	// State is the task's state (cancelled or expired), At when.
	State State     `json:"state"`
	At    time.Time `json:"at"`
}

// InputsRequest asks the orchestrators for the inputs of the task an
// execution runs (ax.inputs.<capability>): how each of its upstreams ended
// (Input). Only the executor dispatched the execution has its token;
// executors do not read task records themselves.
type InputsRequest struct {
	// ID and ExecutionID name the execution (its dispatch's).
	ID          string `json:"id"`
	ExecutionID string `json:"execution_id"`
	// Token is the execution's dispatch token (Dispatch.Token).
	Token string `json:"token"`
}

// InputsReply answers an InputsRequest: the inputs in depends_on order, or
// an error.
type InputsReply struct {
	// Inputs are how the task's upstreams ended, in depends_on order.
	Inputs []Input `json:"inputs,omitempty"`
	// Error says why they could not be read.
	Error string `json:"error,omitempty"`
}

// ClaimStatus is the orchestrator's answer to a claim.
type ClaimStatus string

// The answers to a claim.
const (
	// ClaimGranted: the record now says running on the asking executor
	// (Task and Revision are that record).
	ClaimGranted ClaimStatus = "granted"
	// ClaimRunningElsewhere: another executor holds the execution with a
	// live lease; ask again after the ack wait.
	ClaimRunningElsewhere ClaimStatus = "running_elsewhere"
	// ClaimEnded: the execution is over (the task was cancelled, expired,
	// superseded by a newer dispatch, or ended): do not run it.
	ClaimEnded ClaimStatus = "ended"
	// ClaimNotFound: no record of the task (a leader read).
	ClaimNotFound ClaimStatus = "not_found"
)

// DirectReply is the orchestrator's answer to a direct request: a
// submission, graph or report sent on ax.direct.<the subject it would be
// stored on> (see subjects.md). An empty Error means it was applied (or,
// invalid, handled as a stored one would be: a submission rejected, a
// report dropped with a logged reason): it must not be sent again. Any
// other answer, or none, and the sender stores it on its own subject,
// where it is applied once an orchestrator can.
type DirectReply struct {
	// Error says why the request was not applied.
	Error string `json:"error,omitempty"`
}

// DirectBatch is the body of a batch direct request
// (subject.DirectBatch): the bodies of the messages, each what would be
// stored on the request's subject.
type DirectBatch struct {
	// Messages are the bodies, in order.
	Messages []json.RawMessage `json:"messages"`
}

// DirectBatchReply answers a DirectBatch: Error when none of it was
// applied, else one result per message, in order (an empty Error: that
// one was applied).
type DirectBatchReply struct {
	// Error says why the batch was not applied at all.
	Error string `json:"error,omitempty"`
	// Results are the messages' answers.
	Results []DirectReply `json:"results,omitempty"`
}

// ClaimReply is the orchestrator's answer to a ClaimRequest.
type ClaimReply struct {
	// Status is the answer.
	Status ClaimStatus `json:"status"`
	// Task is the running record a granted claim wrote (or found).
	Task *Task `json:"task,omitempty"`
	// Revision is Task's revision.
	Revision uint64 `json:"revision,omitempty"`
	// Error says why the claim could not be decided (try again later).
	Error string `json:"error,omitempty"`
}

// StateReply is the orchestrator's answer to a state read (ax.state.<id>.<type>):
// the task if it has that type, or the rejection of a submission of that
// id and type; neither is "not found" in Error, also for a task of another
// type (a reader limited to some types learns nothing of the others).
type StateReply struct {
	// Task is the task's record at Revision.
	Task     *Task  `json:"task,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// Rejection is why a submission of that id was refused.
	Rejection *Rejection `json:"rejection,omitempty"`
	// NotFound says there is neither; Error says why the read failed (try
	// again).
	NotFound bool   `json:"not_found,omitempty"`
	Error    string `json:"error,omitempty"`
}

// CommandReply is what the orchestrator answers on the Ax-Reply-To subject.
type CommandReply struct {
	// OK says the command was applied; Error says why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Code says why a command was not applied (ReplyNotFound,
	// ReplyConflict, ReplyInvalid); empty when it was, or from an
	// orchestrator older than the field.
	Code string `json:"code,omitempty"`
	// Task is the task after a task command (cancel, re-drive).
	Task *Task `json:"task,omitempty"`
	// Schedule is the schedule after a schedule command.
	Schedule *Schedule `json:"schedule,omitempty"`
}

// NewID returns a new sortable unique task id (a ULID).
func NewID() string {
	return ulid.MustNew(ulid.Timestamp(time.Now()), rand.Reader).String()
}

// MaxErrorBytes bounds the error text kept for one attempt: a record holds
// the errors of its attempt series and is rewritten at every event, so an
// untruncated error could make it too large to store.
const MaxErrorBytes = 4096

// TruncateError shortens s to at most MaxErrorBytes (on a UTF-8 boundary),
// saying how long it was.
func TruncateError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	suffix := fmt.Sprintf("… (truncated; %d bytes in all)", len(s))
	cut := MaxErrorBytes - len(suffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + suffix
}
