// Package subject builds every stream, consumer, subject and header name AX
// uses. Nothing else concatenates names; subjects.md is the human contract and
// a test keeps the two in step.
package subject

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/ax-run/ax/task"
)

// Stream names.
const (
	StreamSubmit    = "AX_SUBMIT"
	StreamReady     = "AX_READY"
	StreamCompleted = "AX_COMPLETED"
	StreamTasks     = "AX_TASKS"
	StreamTimers    = "AX_TIMERS"
	StreamCommands  = "AX_COMMANDS"
	StreamDLQ       = "AX_DLQ"
	StreamRejected  = "AX_REJECTED"
	StreamHeld      = "AX_HELD"
	StreamAudit     = "AX_AUDIT"
	StreamFanIn     = "AX_FANIN"
	StreamEdges     = "AX_EDGES"
	StreamCounts    = "AX_COUNTS"
	StreamLeases    = "AX_LEASES"
	StreamUnique    = "AX_UNIQUE"
	StreamTypes     = "AX_TYPES"
	StreamEvents    = "AX_EVENTS"
)

// BucketObjects is the legacy object store of planners' shard lists and
// results larger than task.InlineResultLimit, shared by every capability:
// records written before per-capability stores name objects here (an empty
// bucket field), and readers still read them. Nothing writes it any more.
const BucketObjects = "AX_OBJECTS"

// ObjectBucket is the object store of one capability's shard plans and
// large results, AX_OBJECTS_<capability>: only that capability's executors
// may write it (deploy/security). A capability is one token of
// [A-Za-z0-9_-] (≤ 64), so the name is a valid bucket and stream name.
func ObjectBucket(capability string) string { return objectBucketPrefix + capability }

// ObjectBucketCapability is the capability of a per-capability object
// store's name (ok false for any other name, AX_OBJECTS included).
func ObjectBucketCapability(bucket string) (capability string, ok bool) {
	capability, ok = strings.CutPrefix(bucket, objectBucketPrefix)
	return capability, ok && capability != ""
}

const objectBucketPrefix = BucketObjects + "_"

// Key-value buckets.
const (
	// BucketSchedules holds recurring schedules by name.
	BucketSchedules = "AX_SCHEDULES"
	// BucketRetryWindows counts retry starts per task type and window.
	BucketRetryWindows = "AX_RETRY_WINDOWS"
	// BucketControl holds pause switches and circuit-breaker states.
	BucketControl = "AX_CONTROL"
	// BucketSlots holds the concurrency slots taken per concurrency key
	// (task.KeyLimit): which tasks hold them, and an adaptive limit's
	// current value.
	BucketSlots = "AX_SLOTS"
	// BucketRevoked holds the executions the orchestrators revoked: a
	// task cancelled or expired under an execution that may still be
	// queued or running (RevokedKey). Executors watch their capabilities'
	// keys: a dispatch of a revoked execution is not run, and a running
	// one's handler is cancelled.
	BucketRevoked = "AX_REVOKED"
	// BucketKeys holds the orchestrators' secrets: only the orchestrator
	// role may read it (deploy/security).
	BucketKeys = "AX_KEYS"
)

// KeyExecutionToken is the key, in BucketKeys, of the key that signs
// execution tokens (internal/exectoken).
const KeyExecutionToken = "execution-token"

// Keys of the control bucket.
const (
	// ControlPauseAll pauses every task type.
	ControlPauseAll  = "pause.all"
	controlPauseType = "pause.type."
	controlBreaker   = "breaker."
)

// ControlPauseType is the pause switch of one task type.
func ControlPauseType(taskType string) string { return controlPauseType + taskType }

// ControlBreaker is the circuit-breaker state of one task type.
func ControlBreaker(taskType string) string { return controlBreaker + taskType }

// ControlLimit is the key limit (task.KeyLimit) of one key pattern: the
// pattern base64url-encoded (KV keys allow no wildcards).
func ControlLimit(pattern string) string { return controlLimit + LimitID(pattern) }

// LimitID encodes a key pattern as one subject token and KV key part
// (unpadded base64url): the id of a limit command.
func LimitID(pattern string) string { return base64.RawURLEncoding.EncodeToString([]byte(pattern)) }

// ParseLimitID is the inverse of LimitID.
func ParseLimitID(id string) (pattern string, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(id)
	return string(b), err == nil && len(b) > 0
}

const controlLimit = "limit."

// ControlConfiguredLimits holds the key limits of the orchestrators'
// configuration (task.ConfiguredLimits), written by each orchestrator at
// its start so that clients can list them.
const ControlConfiguredLimits = "limits.configured"

// ParseControlKey tells what a control key is about: kind "pause" with
// taskType "" for all types, kind "breaker", or kind "limit" with the
// limit's key pattern in place of the type.
func ParseControlKey(key string) (kind, taskType string, ok bool) {
	if id, isLimit := strings.CutPrefix(key, controlLimit); isLimit {
		pattern, ok := ParseLimitID(id)
		return "limit", pattern, ok
	}
	switch {
	case key == ControlPauseAll:
		return "pause", "", true
	case strings.HasPrefix(key, controlPauseType):
		return "pause", key[len(controlPauseType):], true
	case strings.HasPrefix(key, controlBreaker):
		return "breaker", key[len(controlBreaker):], true
	}
	return "", "", false
}

// Durable consumer names.
const (
	ConsumerSubmit    = "ax-orchestrator-submit"
	ConsumerCompleted = "ax-orchestrator-completed"
	ConsumerTimers    = "ax-orchestrator-timers"
	ConsumerLooks     = "ax-orchestrator-looks"
	ConsumerCommands  = "ax-orchestrator-commands"
	ConsumerEvents    = "ax-orchestrator-events"
	ConsumerMirror    = "ax-mirror"
)

// Headers.
const (
	// HeaderToken carries a dispatch's execution token (on its message in
	// AX_TASKS, never in its record).
	HeaderToken = "Ax-Token"
	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderReplyTo names a core NATS subject where the orchestrator answers a command.
	HeaderReplyTo = "Ax-Reply-To"
	// HeaderSchedule, HeaderScheduleTarget are JetStream's message-schedule headers.
	HeaderSchedule       = "Nats-Schedule"
	HeaderScheduleTarget = "Nats-Schedule-Target"
)

// Wildcards and fixed subjects.
const (
	SubmitAll    = "task.submit.>"
	GraphSubmit  = "task.graph.submit"
	ReadyAll     = "task.ready.>"
	CompletedAll = "task.completed.>"
	TaskAll      = "ax.task.>"
	TimerAll     = "ax.timer.>"
	FireAll      = "ax.fire.>"
	CommandAll   = "ax.cmd.>"
	DLQAll       = "ax.dlq.>"
	RejectedAll  = "ax.rejected.>"
	HeldAll      = "ax.held.>"
	AuditAll     = "ax.audit.>"
	BellAll      = "ax.bell.>"
	FanInAll     = "ax.fanin.>"
	EdgeAll      = "ax.edge.>"
	CountAll     = "ax.count.>"
	LeaseAll     = "ax.lease.>"
	UniqueAll    = "ax.unique.>"
	TaskTypeAll  = "ax.type.>"
)

const (
	submitPrefix    = "task.submit."
	readyPrefix     = "task.ready."
	completedPrefix = "task.completed."
	taskPrefix      = "ax.task."
	dlqPrefix       = "ax.dlq."
	rejectedPrefix  = "ax.rejected."
	bellPrefix      = "ax.bell."
	claimPrefix     = "ax.claim."
	statePrefix     = "ax.state."
	directPrefix    = "ax.direct."
	// DirectAll is every direct request (Direct); the orchestrators answer
	// it as one queue group.
	DirectAll = "ax.direct.>"
	// ClaimAll is every claim subject; the orchestrators answer it as one
	// queue group.
	ClaimAll = "ax.claim.*"
	// InputsAll is every inputs request subject (Inputs); the orchestrators
	// answer it as one queue group.
	InputsAll = "ax.inputs.*"
	// StateAll is every typed state read (State); the orchestrators answer
	// it as one queue group.
	StateAll = "ax.state.>"
)

// Submit is where a spec of type t is submitted without an intake lane
// (the orchestrator takes these in the order they arrive, with graphs).
func Submit(taskType string) string { return submitPrefix + taskType }

// Priorities is the number of priority levels (p0 … p5).
const Priorities = 6

// SubmitLane is where a spec of type t and a priority is submitted: each
// priority has its own intake lane, so a p0 submission is taken at once
// even behind a burst of lower ones.
func SubmitLane(priority int, taskType string) string {
	return laneSubmitPrefix(priority) + taskType
}

func laneSubmitPrefix(priority int) string { return "task.submit-p" + strconv.Itoa(priority) + "." }

// SubmitLaneAll matches every submission of one priority lane.
func SubmitLaneAll(priority int) string { return laneSubmitPrefix(priority) + ">" }

// TypeFromSubmit returns the task type of a task.submit.<type> or
// task.submit-p<N>.<type> subject.
func TypeFromSubmit(subj string) (string, bool) {
	t, ok := strings.CutPrefix(subj, submitPrefix)
	if !ok {
		for p := range Priorities {
			if t, ok = strings.CutPrefix(subj, laneSubmitPrefix(p)); ok {
				break
			}
		}
	}
	return t, ok && t != ""
}

// SubmitSubjects are every submission subject: unlaned, graphs and lanes.
func SubmitSubjects() []string {
	out := []string{SubmitAll, GraphSubmit}
	for p := range Priorities {
		out = append(out, SubmitLaneAll(p))
	}
	return out
}

// ConsumerSubmitLane is the orchestrators' intake consumer of a priority lane.
func ConsumerSubmitLane(priority int) string { return ConsumerSubmit + "-p" + strconv.Itoa(priority) }

// Ready is the subject a ready task of a capability and priority goes to.
func Ready(capability string, priority int) string {
	return readyPrefix + capability + ".p" + strconv.Itoa(priority)
}

// ReadyLevel returns the priority level of a task.ready.<capability>.p<N> subject.
func ReadyLevel(subj string) (int, bool) {
	i := strings.LastIndex(subj, ".p")
	if i < 0 || !strings.HasPrefix(subj, readyPrefix) {
		return 0, false
	}
	n, err := strconv.Atoi(subj[i+2:])
	if err != nil || n < 0 || n > 5 {
		return 0, false
	}
	return n, true
}

// ReadyCapability matches every priority level of a capability.
func ReadyCapability(capability string) string { return readyPrefix + capability + ".*" }

// Bell is the doorbell of a capability's priority level: an empty core
// NATS message the orchestrators publish after dispatching on that level,
// which wakes its idle executors (the dispatch itself never goes to them
// over core NATS: a copy per idle executor would carry its payload).
func Bell(capability string, priority int) string {
	return bellPrefix + capability + ".p" + strconv.Itoa(priority)
}

// BellCapability matches the doorbells of every priority level of a capability.
func BellCapability(capability string) string { return bellPrefix + capability + ".*" }

// BellLevel returns the priority level of an ax.bell.<capability>.p<N> subject.
func BellLevel(subj string) (int, bool) {
	i := strings.LastIndex(subj, ".p")
	if i < 0 || !strings.HasPrefix(subj, bellPrefix) {
		return 0, false
	}
	n, err := strconv.Atoi(subj[i+2:])
	if err != nil || n < 0 || n >= Priorities {
		return 0, false
	}
	return n, true
}

// IsQueueDurable reports whether name is one of the durable consumers AX
// reads its queue streams with (AX_SUBMIT, AX_READY, AX_COMPLETED): the
// orchestrators' intake and report consumers and the executors' ready
// consumers. Only their progress says what AX handled (queue trimming).
func IsQueueDurable(name string) bool {
	switch {
	case name == ConsumerSubmit, name == ConsumerCompleted:
		return true
	case strings.HasPrefix(name, ConsumerSubmit+"-p"):
		n, err := strconv.Atoi(strings.TrimPrefix(name, ConsumerSubmit+"-p"))
		return err == nil && n >= 0 && n < Priorities
	case strings.HasPrefix(name, "ax-ready-"):
		i := strings.LastIndex(name, "-p")
		if i <= len("ax-ready-") {
			return false
		}
		n, err := strconv.Atoi(name[i+2:])
		return err == nil && n >= 0 && n < Priorities
	}
	return false
}

// ReadyConsumer is the durable pull consumer shared by the executors of a
// capability for one priority level.
func ReadyConsumer(capability string, priority int) string {
	return fmt.Sprintf("ax-ready-%s-p%d", capability, priority)
}

// Completed is where executors report an attempt of a task type.
func Completed(taskType string) string { return completedPrefix + taskType }

// Direct is the subject of a direct request for what would otherwise be
// stored on subj: a submission (task.submit…, task.graph.submit) or an
// attempt's report (task.completed.<type>), sent as a core NATS request
// (answered with task.DirectReply). The orchestrator that takes it applies
// it before it replies, so it is never stored on its own; without a reply
// that says it was applied, the sender stores it on subj instead. The
// rights to publish subj and Direct(subj) go together (deploy/security).
func Direct(subj string) string { return directPrefix + subj }

// StoredFromDirect is the subject a direct request stands for (Direct).
func StoredFromDirect(subj string) string { return strings.TrimPrefix(subj, directPrefix) }

// DirectBatch is the subject of a direct request carrying several
// messages that would each be stored on subj (task.DirectBatch): the
// submissions of one type (subj task.submit.<type>), or the reports of one
// type (task.completed.<type>). The orchestrator that takes it applies
// each and answers for each; those not applied the sender stores. The
// rights to publish subj and DirectBatch(subj) go together.
func DirectBatch(subj string) string { return directPrefix + directBatchInfix + subj }

// StoredFromDirectBatch is the subject each message of a batch direct
// request stands for, and whether subj is one (DirectBatch).
func StoredFromDirectBatch(subj string) (string, bool) {
	return strings.CutPrefix(subj, directPrefix+directBatchInfix)
}

const directBatchInfix = "batch."

// directToPrefix begins a direct request addressed to one orchestrator
// (DirectTo); outside DirectAll, so the orchestrators' shared queue group
// never takes one.
const directToPrefix = "ax.direct-to."

// DirectToAll is every direct request addressed to one orchestrator
// (DirectTo): each orchestrator subscribes to its own, DirectToNode.
const DirectToAll = directToPrefix + ">"

// DirectTo is the direct request d (Direct or DirectBatch) addressed to
// the orchestrator whose node token (NodeToken) is node: an executor sends
// an attempt's report to the orchestrator that wrote its dispatch, which
// has the task's record in memory and need not read it; when none answers
// there (that orchestrator stopped), the sender asks them all on d. The
// rights to publish d and DirectTo(*, d) go together (deploy/security).
func DirectTo(node, d string) string {
	return directToPrefix + node + "." + strings.TrimPrefix(d, directPrefix)
}

// DirectToNode is every direct request addressed to the orchestrator
// whose node token is node (DirectTo).
func DirectToNode(node string) string { return directToPrefix + node + ".>" }

// DirectFromDirectTo is the direct request (Direct or DirectBatch) that
// subj, addressed to one orchestrator (DirectTo), stands for, and whether
// subj is one.
func DirectFromDirectTo(subj string) (string, bool) {
	rest, ok := strings.CutPrefix(subj, directToPrefix)
	if !ok {
		return "", false
	}
	_, d, ok := strings.Cut(rest, ".")
	return directPrefix + d, ok
}

// NodeToken is the subject token naming the orchestrator whose node id
// is node (DirectTo): node itself when it is a plain token (letters,
// digits, '-' and '_', at most 64 bytes, as the default ids are), else "n"
// and the hex of its 64-bit FNV-1a hash. Orchestrators and executors
// compute it alike.
func NodeToken(node string) string {
	if task.ValidCapability(node) { // the same form: 1–64 of [A-Za-z0-9_-]
		return node
	}
	h := fnv.New64a()
	h.Write([]byte(node))
	return fmt.Sprintf("n%016x", h.Sum64())
}

// IsCompleted reports whether subj is a report's (Completed).
func IsCompleted(subj string) bool { return strings.HasPrefix(subj, completedPrefix) }

// TypeFromCompleted is the task type of a completed subject (Completed).
func TypeFromCompleted(subj string) string { return strings.TrimPrefix(subj, completedPrefix) }

// A task's history is every message on the subjects under ax.task.<id>.
// (TaskHistory); the last of them is its state, and its stream sequence the
// task's revision. Events go on ax.task.<id>.e (TaskEvents), except its
// dispatches: the event that makes a task ready to run under a new
// execution, handed to the executors of its capability, goes on
// ax.task.<id>.d.<capability>.p<N>.<type> (TaskDispatch), which the
// capability's ready consumers read (DispatchFilter). A record and its
// dispatch are therefore one stored message. Histories written before this
// layout are on ax.task.<id> itself (LegacyTask), read-only.

// TaskEvents is the subject of a task's events other than its dispatches.
func TaskEvents(id string) string { return taskPrefix + id + ".e" }

// TaskDispatch is the subject of a task's dispatch: its ready record,
// delivered to an executor of the capability.
func TaskDispatch(id, capability string, priority int, taskType string) string {
	return taskPrefix + id + ".d." + capability + ".p" + strconv.Itoa(priority) + "." + taskType
}

// TaskHistory matches every subject of a task's history (its events and its
// dispatches): the last message on it is the task's state.
func TaskHistory(id string) string { return taskPrefix + id + ".>" }

// DispatchFilter matches the dispatches of a capability's priority level:
// the filter of its ready consumer (ReadyConsumer) on AX_TASKS.
func DispatchFilter(capability string, priority int) string {
	return taskPrefix + "*.d." + capability + ".p" + strconv.Itoa(priority) + ".>"
}

// LegacyTask is the subject the history of a task created by an earlier
// version was written on (one subject per task); `ax migrate tasks` moves
// its state onto TaskEvents or TaskDispatch.
func LegacyTask(id string) string { return taskPrefix + id }

// LegacyTaskAll matches the legacy history subjects (LegacyTask) only.
const LegacyTaskAll = taskPrefix + "*"

// TaskID returns the task id of any subject of a task's history, current or
// legacy ("" for another subject).
func TaskID(subj string) string {
	rest, ok := strings.CutPrefix(subj, taskPrefix)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}

// IsDispatch reports whether subj is a task's dispatch (TaskDispatch).
func IsDispatch(subj string) bool {
	rest, ok := strings.CutPrefix(subj, taskPrefix)
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ".")
	return ok && strings.HasPrefix(rest, "d.")
}

// ParseDispatch returns the task id, capability, priority and type of a
// dispatch subject (TaskDispatch).
func ParseDispatch(subj string) (id, capability string, priority int, taskType string, ok bool) {
	rest, found := strings.CutPrefix(subj, taskPrefix)
	if !found {
		return "", "", 0, "", false
	}
	parts := strings.SplitN(rest, ".", 5)
	if len(parts) != 5 || parts[1] != "d" || len(parts[3]) != 2 || parts[3][0] != 'p' {
		return "", "", 0, "", false
	}
	p := int(parts[3][1] - '0')
	if p < 0 || p >= Priorities || parts[0] == "" || parts[2] == "" || parts[4] == "" {
		return "", "", 0, "", false
	}
	return parts[0], parts[2], p, parts[4], true
}

// TimerKind names what a timer does when it fires.
type TimerKind string

// Timer kinds.
const (
	// TimerRetry makes a retrying task ready again.
	TimerRetry TimerKind = "retry"
	// TimerStart makes a delayed task (delay, run_at) ready.
	TimerStart TimerKind = "start"
	// TimerDeadline expires an unfinished task (deadline, ttl).
	TimerDeadline TimerKind = "deadline"
	// TimerDispatch re-dispatches a ready task nobody started (dispatch_timeout).
	TimerDispatch TimerKind = "dispatch"
	// TimerSchedule fires a recurring schedule.
	TimerSchedule TimerKind = "schedule"
	// TimerFanIn re-counts a fan-in exactly: the consumer pending count
	// behind the fast count is updated just after a marker is stored, so
	// the member that ends last may read one short.
	TimerFanIn TimerKind = "fanin"
	// TimerWatch is the reconciler's look at an unfinished task that has
	// not moved for longer than its state allows (every unfinished task
	// other than a running one has one armed; a running one gets it at
	// start + timeout + grace).
	TimerWatch TimerKind = "watch"
	// TimerCascade continues an ended task's release or cancellation of
	// its dependents, dependentsStep at a time.
	TimerCascade TimerKind = "cascade"
	// TimerSweep is the reconciler's look at a batch of dispatched tasks
	// (one timer per batch; its id is the batch's).
	TimerSweep TimerKind = "sweep"
	// TimerForget removes a finished task's history once it is older than
	// the configured retention (TaskHistoryMaxAge).
	TimerForget TimerKind = "forget"
	// TimerEffects runs a task's effects from a message of its own, at
	// once or a second later: a task an upstream's cascade just moved, a
	// write that lost its compare-and-set, a task handed a concurrency
	// slot. Handled as a watch is, but on the timers' consumer, not
	// behind the reconciler's looks.
	TimerEffects TimerKind = "effects"
	// TimerEvents continues an event's delivery to the tasks waiting for
	// it (or cancelled by it) past the waiters one message handles: its
	// id is the event subject (<subject>.<match>), its body says from
	// which marker on.
	TimerEvents TimerKind = "events"
)

// TimerKinds are every timer kind, in no particular order.
var TimerKinds = []TimerKind{TimerRetry, TimerStart, TimerDeadline, TimerDispatch, TimerSchedule,
	TimerFanIn, TimerWatch, TimerCascade, TimerSweep, TimerForget, TimerEffects, TimerEvents}

// Look reports whether a kind is background work — the reconciler's looks
// (watch, sweep) and history retention (forget) — consumed apart from the
// timers a task's progress waits for (ConsumerLooks): under faults a
// storm of looks, each waiting out a read timeout, must not hold the
// consumer's workers while retries and releases queue behind them.
func (k TimerKind) Look() bool {
	return k == TimerWatch || k == TimerSweep || k == TimerForget
}

// FireFilters are the fire subjects of the looks (looks true) or of the
// other kinds: the filters of ConsumerLooks and ConsumerTimers, which
// AX_TIMERS, a work queue, requires not to overlap.
func FireFilters(looks bool) []string {
	var out []string
	for _, k := range TimerKinds {
		if k.Look() == looks {
			out = append(out, "ax.fire."+string(k)+".>")
		}
	}
	return out
}

// Timer is the schedule subject of a task's timer of a kind (one per kind).
func Timer(kind TimerKind, id string) string { return "ax.timer." + string(kind) + "." + id }

// Fire is where a timer's message lands when it fires.
func Fire(kind TimerKind, id string) string { return "ax.fire." + string(kind) + "." + id }

// Command kinds sent to the orchestrator.
const (
	CommandCancel  = "cancel"
	CommandRedrive = "redrive"
	// Pause and resume dispatch (or only retries); their id is "all" or
	// "type=<task type>".
	CommandPause  = "pause"
	CommandResume = "resume"
	// Schedule commands; their id is the schedule's name.
	CommandScheduleCreate = "schedule-create"
	CommandSchedulePause  = "schedule-pause"
	CommandScheduleResume = "schedule-resume"
	CommandScheduleDelete = "schedule-delete"
	// Key limit commands (task.KeyLimit); their id is the key pattern's
	// LimitID. limit-set carries the limit in the request's "limit".
	CommandLimitSet    = "limit-set"
	CommandLimitDelete = "limit-delete"
	// CommandDLQDelete discards a task's dead letter (ax dlq rm); its id
	// is the task id. The task's record stays failed.
	CommandDLQDelete = "dlq-delete"
	// CommandApprove and CommandReject decide an event task waiting for
	// its event (ax approve [--reject]); their id is the task id.
	CommandApprove = "approve"
	CommandReject  = "reject"
)

// Command is the subject of an operator command about a task.
func Command(kind, id string) string { return "ax.cmd." + kind + "." + id }

// CommandAs is the subject of a command sent by a named caller (an
// operator, or a producer allowed to cancel): ax.cmd.as.<caller>.<kind>.<id>.
// With per-user permissions each user may publish only under its own name
// (deploy/security), so the name is vouched for by the server.
func CommandAs(caller, kind, id string) string {
	return commandAsPrefix + caller + "." + kind + "." + id
}

const commandAsPrefix = "ax.cmd.as."

// ValidCaller reports whether name can be a command's caller: one subject
// token of at most 64 characters, without wildcards or white space.
func ValidCaller(name string) bool {
	return name != "" && len(name) <= 64 && !strings.ContainsAny(name, ".*> \t\r\n")
}

// ParseCommand splits an ax.cmd.<kind>.<id> or ax.cmd.as.<caller>.<kind>.<id>
// subject; caller is empty for the first form.
func ParseCommand(subj string) (caller, kind, id string, ok bool) {
	if rest, as := strings.CutPrefix(subj, commandAsPrefix); as {
		caller, rest, ok = strings.Cut(rest, ".")
		if !ok || !ValidCaller(caller) {
			return "", "", "", false
		}
		kind, id, ok = strings.Cut(rest, ".")
		return caller, kind, id, ok && id != ""
	}
	rest, ok := strings.CutPrefix(subj, "ax.cmd.")
	if !ok {
		return "", "", "", false
	}
	kind, id, ok = strings.Cut(rest, ".")
	return "", kind, id, ok && id != ""
}

// DLQ is the dead-letter entry of a task.
func DLQ(id string) string { return dlqPrefix + id }

// Rejected is where a rejection of a submission with a known id is kept; an
// empty id (unparseable input) gets a unique anonymous subject.
func Rejected(id, unique string) string {
	if id == "" {
		return rejectedPrefix + "_." + unique
	}
	return rejectedPrefix + id
}

// Inputs is where an executor of capability asks the orchestrators for the
// inputs of a task it runs (task.InputsRequest).
func Inputs(capability string) string { return "ax.inputs." + capability }

// CapabilityFromInputs is the capability of an inputs request subject.
func CapabilityFromInputs(subj string) string { return strings.TrimPrefix(subj, "ax.inputs.") }

// RevokedKey is the AX_REVOKED key of a task's revoked execution:
// <capability>.<id>.
func RevokedKey(capability, id string) string { return capability + "." + id }

// RevokedCapability matches the AX_REVOKED keys of a capability's tasks.
func RevokedCapability(capability string) string { return capability + ".>" }

// Held marks a task held back by a closed gate (pause or open breaker).
func Held(taskType, id string) string { return "ax.held." + taskType + "." + id }

// HeldType matches the held tasks of one type.
func HeldType(taskType string) string { return "ax.held." + taskType + ".*" }

// SlotWait marks a ready task waiting for a concurrency slot of its key
// (task.KeyLimit), by priority so that freed slots go to p0 first:
// ax.slotwait.p<priority>.<key>.<id>. Kept in AX_HELD.
func SlotWait(priority int, key, id string) string {
	return slotWaitPrefix + "p" + strconv.Itoa(priority) + "." + key + "." + id
}

// SlotWaitKey matches the tasks waiting for a slot of key at one priority.
func SlotWaitKey(priority int, key string) string {
	return slotWaitPrefix + "p" + strconv.Itoa(priority) + "." + key + ".*"
}

// SlotWaitAnyPriority matches the tasks waiting for a slot of key at every
// priority.
func SlotWaitAnyPriority(key string) string { return slotWaitPrefix + "*." + key + ".*" }

// ParseSlotWait returns the key and task id of a SlotWait subject.
func ParseSlotWait(subj string) (key, id string, ok bool) {
	rest, ok := strings.CutPrefix(subj, slotWaitPrefix)
	if !ok {
		return "", "", false
	}
	_, rest, ok = strings.Cut(rest, ".")
	dot := strings.LastIndexByte(rest, '.')
	if !ok || dot <= 0 || dot == len(rest)-1 {
		return "", "", false
	}
	return rest[:dot], rest[dot+1:], true
}

const slotWaitPrefix = "ax.slotwait."

// FairOwner is where an orchestrator answers whether it still holds a task
// queued for fairness (core NATS; the instance, new at every start, is
// named in the task's sweep entry and watch).
func FairOwner(instance string) string { return "ax.fairowner." + instance }

// FairOwnerAll matches every FairOwner subject.
const FairOwnerAll = "ax.fairowner.>"

// OwnedSweep is the id of a sweep timer (TimerSweep) holding tasks that the
// orchestrator instance owner queued for fairness: two tokens,
// <owner>.<batch>, so that the sweeps of one instance can be listed
// (OwnedSweepsAll) when it is gone. owner is an instance name (a NUID).
func OwnedSweep(owner, batch string) string { return owner + "." + batch }

// OwnedSweepsAll matches the schedules of every OwnedSweep timer.
const OwnedSweepsAll = "ax.timer.sweep.*.*"

// OwnerOfSweep returns the owner of an OwnedSweep schedule's subject.
func OwnerOfSweep(subj string) (string, bool) {
	rest, ok := strings.CutPrefix(subj, "ax.timer."+string(TimerSweep)+".")
	if !ok {
		return "", false
	}
	owner, batch, ok := strings.Cut(rest, ".")
	if !ok || owner == "" || batch == "" || strings.Contains(batch, ".") {
		return "", false
	}
	return owner, true
}

// Event is where an event is published (sdk.Client.Signal) and kept, in
// AX_EVENTS: ax.event.<event subject>, the event subject being a
// wait_for's <subject>.<match> (task.ValidEventSubject).
func Event(eventSubject string) string { return eventPrefix + eventSubject }

// EventAll matches every event.
const EventAll = "ax.event.>"

// ParseEvent returns the event subject of an Event subject.
func ParseEvent(subj string) (string, bool) {
	es, ok := strings.CutPrefix(subj, eventPrefix)
	return es, ok && es != ""
}

const eventPrefix = "ax.event."

// EventWait marks an event task waiting for the events of eventSubject:
// ax.eventwait.<event subject>.<id>. Kept in AX_HELD.
func EventWait(eventSubject, id string) string { return eventWaitPrefix + eventSubject + "." + id }

// EventWaiters matches the markers of the tasks waiting for eventSubject.
func EventWaiters(eventSubject string) string { return eventWaitPrefix + eventSubject + ".*" }

// EventWaitID returns the task id of an EventWait subject.
func EventWaitID(subj string) (string, bool) {
	dot := strings.LastIndexByte(subj, '.')
	if !strings.HasPrefix(subj, eventWaitPrefix) || dot < 0 || dot == len(subj)-1 {
		return "", false
	}
	return subj[dot+1:], true
}

// EventWaitCount is the counter (a JetStream counter subject in AX_COUNTS)
// of the markers of eventSubject: ax.count.eventwait.<event subject>, a
// hint of how many tasks wait for it (never a task's FanInCount: a task
// id has no dot).
func EventWaitCount(eventSubject string) string { return "ax.count.eventwait." + eventSubject }

// EventWaitAll matches every event task's marker.
const EventWaitAll = "ax.eventwait.>"

const eventWaitPrefix = "ax.eventwait."

// SlotWaitAll matches every task waiting for a concurrency slot.
const SlotWaitAll = "ax.slotwait.>"

// Audit is where a non-task audit event goes: kind "breaker" or "pause",
// key the task type (or "all").
func Audit(kind, key string) string { return "ax.audit." + kind + "." + key }

// PauseScope is the command id of a pause or resume: "all" or "type=<type>".
func PauseScope(taskType string) string {
	if taskType == "" {
		return "all"
	}
	return "type=" + taskType
}

// ParsePauseScope is the inverse of PauseScope.
func ParsePauseScope(id string) (taskType string, ok bool) {
	if id == "all" {
		return "", true
	}
	t, ok := strings.CutPrefix(id, "type=")
	return t, ok && t != ""
}

const fanInPrefix = "ax.fanin."

// FanIn is the marker recording that member (a shard index or an upstream
// task id) of waiter (a sharded parent or a wide fan-in task) ended in state.
func FanIn(waiter, member, state string) string {
	return fanInPrefix + waiter + "." + member + "." + state
}

// FanInMember matches member's marker whatever its state.
func FanInMember(waiter, member string) string { return fanInPrefix + waiter + "." + member + ".*" }

// FanInWaiter matches every marker of waiter.
func FanInWaiter(waiter string) string { return fanInPrefix + waiter + ".*.*" }

// FanInState matches waiter's markers of one state.
func FanInState(waiter, state string) string { return fanInPrefix + waiter + ".*." + state }

// FanInCount is the counter (a JetStream counter subject in AX_COUNTS) of
// how many of waiter's members ended.
func FanInCount(waiter string) string { return "ax.count." + waiter }

const edgePrefix = "ax.edge."

// Edge records that child listed up in its depends_on: one message,
// written once, by the orchestrator when it registers the child.
func Edge(up, child string) string { return edgePrefix + up + "." + child }

// EdgesOf matches every edge from up to its dependents.
func EdgesOf(up string) string { return edgePrefix + up + ".*" }

// EdgeChild returns the dependent's id of an ax.edge.<up>.<child> subject.
func EdgeChild(subj, up string) (string, bool) {
	return strings.CutPrefix(subj, edgePrefix+up+".")
}

// Claim is where an executor of capability asks the orchestrator to claim
// an attempt (task.ClaimRequest, a core NATS request; see ClaimAll).
func Claim(capability string) string { return claimPrefix + capability }

// State is where a client asks an orchestrator for the state of task id
// of type typ (a core NATS request; task.StateReply). The type is in the
// subject so that the server can scope the right by type: a producer
// limited to some types may read only their tasks (deploy/security).
func State(id, typ string) string { return statePrefix + id + "." + typ }

// StatePattern matches the state reads of the types matching typePattern
// ("email.>", "pdf.render").
func StatePattern(typePattern string) string { return statePrefix + "*." + typePattern }

// ParseState returns the task id and type of a State subject.
func ParseState(subj string) (id, typ string, ok bool) {
	rest, ok := strings.CutPrefix(subj, statePrefix)
	if !ok {
		return "", "", false
	}
	id, typ, ok = strings.Cut(rest, ".")
	return id, typ, ok && id != "" && typ != ""
}

// CapabilityFromClaim is the capability token of a claim subject.
func CapabilityFromClaim(subj string) string { return strings.TrimPrefix(subj, claimPrefix) }

// LeaseCapability matches the leases of one capability's tasks: an
// executor may renew only those (deploy/security).
func LeaseCapability(capability string) string { return "ax.lease." + capability + ".>" }

// LegacyLease is where executors before leases named their task's
// capability kept a task's lease (ax.lease.<id>); read as a fallback while
// such executors may still run.
func LegacyLease(id string) string { return "ax.lease." + id }

// Lease is where the executor running a task of a capability long enough
// to heart-beat keeps its lease: the last message, with a TTL, while it is
// alive.
func Lease(capability, id string) string { return "ax.lease." + capability + "." + id }

// Unique is where the task holding a unique_key of a type is recorded: the
// subject's one message, written with an expected last sequence of 0 and a
// TTL of the key's unique_window. The key travels base64url-encoded
// (unpadded), so any key is one subject token.
func Unique(taskType, key string) string {
	return "ax.unique." + taskType + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// ReplyInbox is how every subject an orchestrator answers a command on
// starts (the Ax-Reply-To header): nats.go's inboxes, and custom prefixes
// such as "_INBOX.<user>" (deploy/security), do.
const ReplyInbox = "_INBOX"

// ReplyToAllowed reports whether subj may receive a command reply: a
// literal subject (no wildcard, no empty token, no white space) starting
// with ReplyInbox. The orchestrator publishes the reply with its own rights,
// which cover every task's history and dispatch, so any other subject would
// let whoever may send a command have the orchestrator write where the
// sender may not.
func ReplyToAllowed(subj string) bool {
	if !strings.HasPrefix(subj, ReplyInbox) || strings.ContainsAny(subj, " \t\r\n") {
		return false
	}
	for tok := range strings.SplitSeq(subj, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

const taskTypePrefix = "ax.type."

// TaskType is where a task type the orchestrators accept new tasks for is
// recorded when a limit on distinct types is configured: one message per
// type, each written with an expected last stream sequence, so the types
// are counted in one agreed order (see package typeset).
func TaskType(taskType string) string { return taskTypePrefix + taskType }

// TaskTypeFrom returns the task type of an ax.type.<type> subject.
func TaskTypeFrom(subj string) (string, bool) {
	t, ok := strings.CutPrefix(subj, taskTypePrefix)
	return t, ok && t != ""
}
