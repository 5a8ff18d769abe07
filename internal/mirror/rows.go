package mirror

import (
	"encoding/json"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ax-run/ax/internal/clip"
	"github.com/ax-run/ax/task"
)

// Column size limits the mapping enforces so a long reason, error or actor
// never makes a batch fail.
const (
	maxTextBytes = 16 << 10
	maxNameRunes = 255
)

// Attempt outcomes stored in ax_attempts.outcome.
const (
	OutcomeRunning   = "running"
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeExpired   = "expired"
	// OutcomeSnoozed: the handler snoozed; the attempt runs again.
	OutcomeSnoozed = "snoozed"
	// OutcomeSleeping: the handler began a durable sleep; the attempt
	// runs again after it.
	OutcomeSleeping = "sleeping"
)

// record is one AX_TASKS message: its stream sequence, the task id from its
// subject and the decoded event.
type record struct {
	Seq    uint64
	TaskID string
	Event  task.Event
}

// eventRow is a row of ax_events.
type eventRow struct {
	Seq         uint64
	TaskID      string
	Type        string
	Kind        string
	From        string // "" → NULL
	To          string
	At          time.Time
	Attempt     int
	ExecutionID string // "" → NULL
	Actor       string
	Reason      string // "" → NULL
}

// taskRow is a row of ax_tasks: the task as of the event LastSeq.
type taskRow struct {
	ID          string
	Type        string
	State       string
	Priority    int
	Capability  string
	Attempt     int
	MaxRetries  int
	Redrives    int
	Reason      string
	LastError   string
	Executor    string
	ExecutionID string
	SubmittedAt time.Time
	// ReadyAt is the earliest ready_at seen; the upsert keeps the minimum.
	ReadyAt    *time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	RetryAt    *time.Time
	StartAt    *time.Time
	ExpiresAt  *time.Time
	Dispatches int
	UpdatedAt  time.Time
	StateSince time.Time
	DependsOn  string // JSON array
	Dependents string // JSON array
	// TriggerRule is the rule of a task with depends_on, the default
	// applied ("" → NULL for a task without).
	TriggerRule string
	// UniqueKey, DuplicateOf and CancelledBy are the record's ("" → NULL).
	UniqueKey   string
	DuplicateOf string
	CancelledBy string
	// ParentID is a shard's parent task ("" → NULL for any other task).
	ParentID string
	// ShardID is a shard's index in its parent's plan as a decimal string
	// ("0", "1"…; "" → NULL for any other task). Sort by it numerically
	// with CAST(shard_id AS UNSIGNED).
	ShardID string
	LastSeq uint64
}

// attemptRow is what one event says about an execution attempt.
type attemptRow struct {
	ExecutionID string
	TaskID      string
	Type        string
	Attempt     int
	Executor    string
	StartedAt   time.Time
	FinishedAt  *time.Time
	Outcome     string
	Error       string
	Seq         uint64
}

// batch is what one transaction writes.
type batch struct {
	events   []eventRow
	tasks    []taskRow
	attempts []attemptRow
	edges    []edgeRow
	steps    []stepRow
	waits    []eventWaitRow
}

// stepRow is an ax_steps row: a durable step or sleep a task stored.
type stepRow struct {
	TaskID       string
	Name         string
	Kind         string // step or sleep
	Attempt      int
	ExecutionID  string
	Executor     string // "" → NULL
	StoredAt     time.Time
	SleepUntil   *time.Time
	Result       string // JSON; "" → NULL
	ResultObject string // "" → NULL
	ResultBucket string // "" → NULL
	ResultDigest string // "" → NULL
	Seq          uint64
}

// stepRowOf maps an event that stored a step (kind step) or began a sleep
// (to retrying, the sleep its record's last step) to the step's row.
func stepRowOf(r record) (stepRow, bool) {
	ev := r.Event
	t := ev.Task
	n := len(t.Steps)
	if n == 0 {
		return stepRow{}, false
	}
	st := t.Steps[n-1]
	switch {
	case ev.Kind == task.KindStep:
	case ev.Kind == task.KindTransition && ev.To == task.Retrying && t.Snoozed && st.IsSleep():
	default:
		return stepRow{}, false
	}
	row := stepRow{TaskID: r.TaskID, Name: st.Name, Kind: "step", Attempt: st.Attempt, ExecutionID: st.ExecutionID,
		Executor: clipRunes(st.Executor, maxNameRunes), StoredAt: utc(st.At), SleepUntil: utcPtr(st.SleepUntil),
		Result: string(st.Result), ResultObject: st.ResultObject, ResultBucket: st.ResultBucket, ResultDigest: st.ResultDigest, Seq: r.Seq}
	if st.IsSleep() {
		row.Kind = "sleep"
	}
	return row, true
}

// sleeping reports whether a retrying record is a durable sleep: its last
// step is a sleep ending when it is to be retried.
func sleeping(t *task.Task) bool {
	n := len(t.Steps)
	return t.Snoozed && n > 0 && t.Steps[n-1].IsSleep() && t.RetryAt != nil && t.Steps[n-1].SleepUntil != nil &&
		t.Steps[n-1].SleepUntil.Equal(*t.RetryAt)
}

// eventWaitRow is an ax_event_waits row: an event task's wait and how it
// ended, as of the event LastSeq.
type eventWaitRow struct {
	TaskID       string
	Type         string
	Subject      string
	Match        string
	TimeoutMS    int64
	Outcome      string
	WaitingSince *time.Time
	TimeoutAt    *time.Time
	EventSeq     uint64 // 0 → NULL
	EventData    string // JSON; "" → NULL
	EndedAt      *time.Time
	DecidedBy    string // "" → NULL
	Reason       string // "" → NULL
	UpdatedAt    time.Time
	LastSeq      uint64
}

// Outcomes of an event task in ax_event_waits.outcome.
const (
	WaitPending   = "pending"
	WaitWaiting   = "waiting"
	WaitEvent     = "event"
	WaitApproved  = "approved"
	WaitRejected  = "rejected"
	WaitExpired   = "expired"
	WaitCancelled = "cancelled"
)

// eventWaitRowOf maps an event of an event task to its ax_event_waits row.
func eventWaitRowOf(r record) (eventWaitRow, bool) {
	t := r.Event.Task
	w := t.WaitFor
	if w == nil {
		return eventWaitRow{}, false
	}
	row := eventWaitRow{TaskID: r.TaskID, Type: t.Type, Subject: w.Subject, Match: w.Match, TimeoutMS: w.Timeout.Std().Milliseconds(),
		WaitingSince: utcPtr(t.EventWaitSince), TimeoutAt: utcPtr(t.ExpiresAt), UpdatedAt: utc(t.UpdatedAt), LastSeq: r.Seq}
	if row.UpdatedAt.IsZero() {
		row.UpdatedAt = utc(r.Event.At)
	}
	switch {
	case !t.State.Terminal() && t.EventWaitSince == nil:
		row.Outcome = WaitPending
	case !t.State.Terminal():
		row.Outcome = WaitWaiting
	case t.Approval != nil && t.Approval.Approved:
		row.Outcome = WaitApproved
	case t.Approval != nil:
		row.Outcome = WaitRejected
	case t.State == task.Succeeded && t.EventSeq != 0:
		row.Outcome, row.EventSeq, row.EventData = WaitEvent, t.EventSeq, string(t.Result)
	default:
		row.Outcome = string(t.State) // expired, cancelled
	}
	if t.State.Terminal() {
		row.EndedAt = utcPtr(t.FinishedAt)
	}
	if a := t.Approval; a != nil {
		row.DecidedBy = clipRunes(a.By, maxNameRunes)
		row.Reason = clip.Bytes(a.Reason, maxTextBytes)
	}
	return row, true
}

// edgeRow is an ax_edges row: dependent lists upstream in its depends_on.
type edgeRow struct {
	Upstream, Dependent string
}

// eventRowOf maps an event to its ax_events row.
func eventRowOf(r record) eventRow {
	ev := r.Event
	return eventRow{
		Seq:         r.Seq,
		TaskID:      r.TaskID,
		Type:        ev.Task.Type,
		Kind:        string(ev.Kind),
		From:        string(ev.From),
		To:          string(ev.To),
		At:          utc(ev.At),
		Attempt:     ev.Task.Attempt,
		ExecutionID: ev.Task.ExecutionID,
		Actor:       clipRunes(ev.Actor, maxNameRunes),
		Reason:      clip.Bytes(ev.Reason, maxTextBytes),
	}
}

// taskRowOf maps the snapshot inside an event to its ax_tasks row.
func taskRowOf(r record) taskRow {
	t := r.Event.Task
	row := taskRow{
		ID:          r.TaskID,
		Type:        t.Type,
		State:       string(t.State),
		Priority:    t.PriorityLevel(),
		Capability:  t.Capability,
		Attempt:     t.Attempt,
		MaxRetries:  t.RetryLimit(),
		Redrives:    t.Redrives,
		Reason:      clip.Bytes(t.Reason, maxTextBytes),
		Executor:    clipRunes(t.Executor, maxNameRunes),
		ExecutionID: t.ExecutionID,
		SubmittedAt: utc(t.SubmittedAt),
		ReadyAt:     utcPtr(t.ReadyAt),
		StartedAt:   utcPtr(t.StartedAt),
		FinishedAt:  utcPtr(t.FinishedAt),
		RetryAt:     utcPtr(t.RetryAt),
		StartAt:     utcPtr(t.StartAt),
		ExpiresAt:   utcPtr(t.ExpiresAt),
		Dispatches:  t.Dispatches,
		UpdatedAt:   utc(t.UpdatedAt),
		StateSince:  stateSince(r.Event),
		DependsOn:   jsonList(t.DependsOn),
		Dependents:  jsonList(t.Dependents),
		UniqueKey:   clipRunes(t.UniqueKey, task.MaxUniqueKeyLen),
		DuplicateOf: t.DuplicateOf,
		CancelledBy: t.CancelledBy,
		LastSeq:     r.Seq,
	}
	if len(t.DependsOn) > 0 {
		row.TriggerRule = string(t.Trigger())
	}
	if t.IsShard() {
		row.ParentID = t.Parent
		row.ShardID = strconv.Itoa(t.ShardIndex)
	}
	if n := len(t.Errors); n > 0 {
		row.LastError = clip.Bytes(t.Errors[n-1].Error, maxTextBytes)
	}
	if row.UpdatedAt.IsZero() {
		row.UpdatedAt = utc(r.Event.At)
	}
	if row.SubmittedAt.IsZero() {
		row.SubmittedAt = row.UpdatedAt
	}
	return row
}

// stateSince is when the task entered its current state, derived from the
// snapshot alone so the row is the same whichever event of that state wins
// (a dependent_added event does not restart the clock).
func stateSince(ev task.Event) time.Time {
	t := ev.Task
	var p *time.Time
	switch t.State {
	case task.Waiting:
		p = &t.SubmittedAt
		if t.Sharding != nil && t.Phase == task.PhaseShards {
			p = &t.Sharding.PlannedAt // waiting for its shards since its plan
		}
	case task.Ready:
		p = t.ReadyAt
	case task.Running:
		p = t.StartedAt
	case task.Retrying:
		if n := len(t.Errors); n > 0 {
			p = &t.Errors[n-1].At
		}
	case task.Succeeded, task.Failed, task.Cancelled, task.Expired:
		p = t.FinishedAt
	}
	if p != nil && !p.IsZero() {
		return utc(*p)
	}
	if ev.Kind == task.KindTransition && !ev.At.IsZero() {
		return utc(ev.At)
	}
	return utc(t.UpdatedAt)
}

// attemptRowOf maps an event to what it says about an execution attempt:
// a claim or takeover (→ running) opens it, the end of an attempt (out of
// running, or out of ready by a report: task.Event.EndsAttempt) closes it
// with an outcome, opening it too when nothing marked it running. Other events say nothing about attempts.
func attemptRowOf(r record) (attemptRow, bool) {
	ev := r.Event
	t := ev.Task
	if ev.Kind != task.KindTransition || t.ExecutionID == "" {
		return attemptRow{}, false
	}
	row := attemptRow{
		ExecutionID: t.ExecutionID,
		TaskID:      r.TaskID,
		Type:        t.Type,
		Attempt:     t.Attempt,
		Executor:    clipRunes(t.Executor, maxNameRunes),
		Seq:         r.Seq,
	}
	started := utc(ev.At)
	if t.StartedAt != nil && !t.StartedAt.IsZero() {
		started = utc(*t.StartedAt)
	}
	row.StartedAt = started
	switch {
	case ev.To == task.Running:
		row.Outcome = OutcomeRunning
		return row, true
	case ev.EndsAttempt():
		at := utc(ev.At)
		row.FinishedAt = &at
		switch ev.To {
		case task.Succeeded:
			row.Outcome = OutcomeSucceeded
		case task.Retrying:
			if t.Snoozed {
				// The record holds the attempt before the snoozed one.
				row.Outcome, row.Attempt = OutcomeSnoozed, t.Attempt+1
				if sleeping(&t) {
					row.Outcome = OutcomeSleeping
				}
				break
			}
			fallthrough
		case task.Failed:
			row.Outcome = OutcomeFailed
			for i := len(t.Errors) - 1; i >= 0; i-- {
				if t.Errors[i].ExecutionID == t.ExecutionID {
					row.Error = clip.Bytes(t.Errors[i].Error, maxTextBytes)
					break
				}
			}
		case task.Cancelled:
			row.Outcome = OutcomeCancelled
		case task.Expired:
			row.Outcome = OutcomeExpired
		default:
			row.Outcome = string(ev.To)
		}
		return row, true
	}
	return attemptRow{}, false
}

// buildBatch maps the records of one fetch to the rows of one transaction:
// every event; per task only the row of its newest event (with the earliest
// ready_at seen); per attempt every change in sequence order. Rows are
// sorted by primary key so concurrent mirrors lock in the same order.
func buildBatch(recs []record) batch {
	recs = append([]record(nil), recs...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	var b batch
	latest := make(map[string]int) // task id → index in b.tasks
	waits := make(map[string]int)  // task id → index in b.waits
	for _, r := range recs {
		b.events = append(b.events, eventRowOf(r))
		row := taskRowOf(r)
		if i, ok := latest[row.ID]; ok {
			// Records are in sequence order: the later one wins.
			row.ReadyAt = earliest(b.tasks[i].ReadyAt, row.ReadyAt)
			b.tasks[i] = row
		} else {
			latest[row.ID] = len(b.tasks)
			b.tasks = append(b.tasks, row)
		}
		if a, ok := attemptRowOf(r); ok {
			b.attempts = append(b.attempts, a)
		}
		if st, ok := stepRowOf(r); ok {
			b.steps = append(b.steps, st)
		}
		if w, ok := eventWaitRowOf(r); ok {
			// Records are in sequence order: the later one wins.
			if i, ok := waits[w.TaskID]; ok {
				b.waits[i] = w
			} else {
				waits[w.TaskID] = len(b.waits)
				b.waits = append(b.waits, w)
			}
		}
		if r.Event.Kind == task.KindTransition && r.Event.From == "" {
			// The creation event: its edges, once.
			for _, up := range r.Event.Task.DependsOn {
				b.edges = append(b.edges, edgeRow{Upstream: up, Dependent: r.TaskID})
			}
		}
	}
	sort.Slice(b.edges, func(i, j int) bool {
		if b.edges[i].Upstream != b.edges[j].Upstream {
			return b.edges[i].Upstream < b.edges[j].Upstream
		}
		return b.edges[i].Dependent < b.edges[j].Dependent
	})
	sort.SliceStable(b.steps, func(i, j int) bool {
		if b.steps[i].TaskID != b.steps[j].TaskID {
			return b.steps[i].TaskID < b.steps[j].TaskID
		}
		return b.steps[i].Name < b.steps[j].Name
	})
	b.events = dedupEvents(b.events)
	sort.Slice(b.tasks, func(i, j int) bool { return b.tasks[i].ID < b.tasks[j].ID })
	sort.Slice(b.waits, func(i, j int) bool { return b.waits[i].TaskID < b.waits[j].TaskID })
	sort.SliceStable(b.attempts, func(i, j int) bool {
		if b.attempts[i].ExecutionID != b.attempts[j].ExecutionID {
			return b.attempts[i].ExecutionID < b.attempts[j].ExecutionID
		}
		return b.attempts[i].Seq < b.attempts[j].Seq
	})
	return b
}

// dedupEvents drops repeated sequences (a message delivered twice within
// one fetch) from rows sorted by sequence.
func dedupEvents(rows []eventRow) []eventRow {
	out := rows[:0]
	for i, r := range rows {
		if i > 0 && r.Seq == rows[i-1].Seq {
			continue
		}
		out = append(out, r)
	}
	return out
}

func earliest(a, b *time.Time) *time.Time {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.Before(*a):
		return b
	}
	return a
}

func jsonList(ids []string) string {
	if len(ids) == 0 {
		return "[]"
	}
	data, err := json.Marshal(ids)
	if err != nil {
		return "[]"
	}
	return string(data)
}

func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func utcPtr(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := utc(*t)
	return &u
}

// clipRunes shortens s to at most n characters.
func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
