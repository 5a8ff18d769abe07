package mirror

import (
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/clip"
	"github.com/ax-run/ax/task"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }
func ptr(t time.Time) *time.Time   { return &t }

func snapshot(state task.State, mod func(*task.Task)) task.Task {
	t := task.Task{
		Spec:        task.Spec{ID: "T1", Type: "demo.flaky", Priority: new(1), Capability: "default", MaxRetries: new(2)},
		State:       state,
		Attempt:     1,
		ExecutionID: "EX1",
		SubmittedAt: at(0),
		UpdatedAt:   at(time.Second),
	}
	if mod != nil {
		mod(&t)
	}
	return t
}

func TestEventRowOf(t *testing.T) {
	tests := []struct {
		name string
		rec  record
		want eventRow
	}{
		{
			name: "creation has no from state",
			rec: record{Seq: 7, TaskID: "T1", Event: task.Event{Kind: task.KindTransition, To: task.Ready, At: at(0),
				Actor: "orch-1", Reason: "submitted", Task: snapshot(task.Ready, nil)}},
			want: eventRow{Seq: 7, TaskID: "T1", Type: "demo.flaky", Kind: "transition", To: "ready",
				At: at(0).Truncate(time.Microsecond), Attempt: 1, ExecutionID: "EX1", Actor: "orch-1", Reason: "submitted"},
		},
		{
			name: "claim by an executor",
			rec: record{Seq: 9, TaskID: "T1", Event: task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Running,
				At: at(time.Second), Actor: "exec-a", Reason: "claimed by exec-a", Task: snapshot(task.Running, nil)}},
			want: eventRow{Seq: 9, TaskID: "T1", Type: "demo.flaky", Kind: "transition", From: "ready", To: "running",
				At: at(time.Second).Truncate(time.Microsecond), Attempt: 1, ExecutionID: "EX1", Actor: "exec-a", Reason: "claimed by exec-a"},
		},
		{
			name: "dependent added keeps the state",
			rec: record{Seq: 10, TaskID: "T1", Event: task.Event{Kind: task.KindDependentAdded, From: task.Waiting, To: task.Waiting,
				At: at(2 * time.Second), Actor: "orch-1", Task: snapshot(task.Waiting, func(t *task.Task) { t.ExecutionID = "" })}},
			want: eventRow{Seq: 10, TaskID: "T1", Type: "demo.flaky", Kind: "dependent_added", From: "waiting", To: "waiting",
				At: at(2 * time.Second).Truncate(time.Microsecond), Attempt: 1, Actor: "orch-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := eventRowOf(tc.rec); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestAttemptRowOf(t *testing.T) {
	fail := func(t *task.Task) {
		t.StartedAt = ptr(at(time.Second))
		t.Executor = "exec-a"
		t.Errors = []task.AttemptError{
			{Attempt: 1, ExecutionID: "OLD", Error: "an older series"},
			{Attempt: 1, ExecutionID: "EX1", Error: "boom", At: at(3 * time.Second)},
		}
	}
	running := func(t *task.Task) { t.StartedAt = ptr(at(time.Second)); t.Executor = "exec-a" }
	tests := []struct {
		name     string
		kind     task.EventKind
		from, to task.State
		mod      func(*task.Task)
		ok       bool
		outcome  string
		errText  string
		finished bool
	}{
		{"created ready: no attempt yet", task.KindTransition, "", task.Ready, nil, false, "", "", false},
		{"claim opens the attempt", task.KindTransition, task.Ready, task.Running, running, true, OutcomeRunning, "", false},
		{"takeover keeps it running", task.KindTransition, task.Running, task.Running, running, true, OutcomeRunning, "", false},
		{"success closes it", task.KindTransition, task.Running, task.Succeeded, running, true, OutcomeSucceeded, "", true},
		{"failure with retry", task.KindTransition, task.Running, task.Retrying, fail, true, OutcomeFailed, "boom", true},
		{"snooze closes it, not as a failure", task.KindTransition, task.Running, task.Retrying, func(t *task.Task) {
			running(t)
			t.Snoozed, t.Snoozes, t.Attempt = true, 1, 0
		}, true, OutcomeSnoozed, "", true},
		{"final failure", task.KindTransition, task.Running, task.Failed, fail, true, OutcomeFailed, "boom", true},
		{"cancelled while running", task.KindTransition, task.Running, task.Cancelled, running, true, OutcomeCancelled, "", true},
		{"expired while running", task.KindTransition, task.Running, task.Expired, running, true, OutcomeExpired, "", true},
		{"cancelled before a claim", task.KindTransition, task.Ready, task.Cancelled, nil, false, "", "", false},
		{"retry made ready again", task.KindTransition, task.Retrying, task.Ready, nil, false, "", "", false},
		{"dependent added while running", task.KindDependentAdded, task.Running, task.Running, running, false, "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := task.Event{Kind: tc.kind, From: tc.from, To: tc.to, At: at(3 * time.Second), Actor: "x", Task: snapshot(tc.to, tc.mod)}
			got, ok := attemptRowOf(record{Seq: 5, TaskID: "T1", Event: ev})
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if got.Outcome != tc.outcome || got.Error != tc.errText || (got.FinishedAt != nil) != tc.finished {
				t.Fatalf("got %+v", got)
			}
			if got.ExecutionID != "EX1" || got.TaskID != "T1" || got.Seq != 5 || got.Type != "demo.flaky" || got.Attempt != 1 {
				t.Fatalf("identity wrong: %+v", got)
			}
			if !got.StartedAt.Equal(at(time.Second).Truncate(time.Microsecond)) {
				t.Fatalf("started_at %v", got.StartedAt)
			}
		})
	}
}

func TestTaskRowOfStateSince(t *testing.T) {
	tests := []struct {
		name  string
		kind  task.EventKind
		state task.State
		mod   func(*task.Task)
		want  time.Time
	}{
		{"waiting: since submission", task.KindTransition, task.Waiting, nil, at(0)},
		{"ready: since ready_at", task.KindTransition, task.Ready, func(t *task.Task) { t.ReadyAt = ptr(at(4 * time.Second)) }, at(4 * time.Second)},
		{"running: since started_at", task.KindTransition, task.Running, func(t *task.Task) { t.StartedAt = ptr(at(5 * time.Second)) }, at(5 * time.Second)},
		{"retrying: since the last error", task.KindTransition, task.Retrying, func(t *task.Task) {
			t.Errors = []task.AttemptError{{At: at(6 * time.Second)}}
		}, at(6 * time.Second)},
		{"terminal: since finished_at", task.KindTransition, task.Succeeded, func(t *task.Task) { t.FinishedAt = ptr(at(7 * time.Second)) }, at(7 * time.Second)},
		{"dependent added does not restart the clock", task.KindDependentAdded, task.Running, func(t *task.Task) {
			t.StartedAt = ptr(at(5 * time.Second))
		}, at(5 * time.Second)},
		{"missing timestamp falls back to the event time", task.KindTransition, task.Ready, nil, at(9 * time.Second)},
		{"waiting for shards: since the plan", task.KindShardsRegistered, task.Waiting, func(t *task.Task) {
			t.Phase, t.Sharding = task.PhaseShards, &task.Sharding{PlannedAt: at(8 * time.Second)}
		}, at(8 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := task.Event{Kind: tc.kind, From: tc.state, To: tc.state, At: at(9 * time.Second), Task: snapshot(tc.state, tc.mod)}
			row := taskRowOf(record{Seq: 3, TaskID: "T1", Event: ev})
			if !row.StateSince.Equal(tc.want.Truncate(time.Microsecond)) {
				t.Fatalf("state_since %v, want %v", row.StateSince, tc.want)
			}
		})
	}
}

func TestTaskRowOfFields(t *testing.T) {
	ev := task.Event{Kind: task.KindTransition, From: task.Running, To: task.Failed, At: at(time.Minute), Task: snapshot(task.Failed, func(t *task.Task) {
		t.DependsOn = []string{"A", "B"}
		t.Errors = []task.AttemptError{{Error: "first"}, {Error: "last"}}
		t.Redrives = 2
		t.Executor = "exec-b"
	})}
	row := taskRowOf(record{Seq: 42, TaskID: "T1", Event: ev})
	if row.LastError != "last" || row.DependsOn != `["A","B"]` || row.Dependents != "[]" || row.LastSeq != 42 ||
		row.Redrives != 2 || row.Executor != "exec-b" || row.State != "failed" || row.ReadyAt != nil {
		t.Fatalf("row %+v", row)
	}
}

// TestTaskRowOfDAGFields: the trigger rule of a task with depends_on (the
// default spelled out), none without; unique key, duplicate_of and
// cancelled_by as the record has them.
func TestTaskRowOfDAGFields(t *testing.T) {
	cases := []struct {
		name                           string
		mod                            func(*task.Task)
		rule, key, duplicate, upstream string
	}{
		{"no dependencies", nil, "", "", "", ""},
		{"default rule", func(t *task.Task) { t.DependsOn = []string{"A"} }, "all_succeeded", "", "", ""},
		{"cleanup step", func(t *task.Task) { t.DependsOn, t.TriggerRule = []string{"A"}, task.TriggerAnyFailed }, "any_failed", "", "", ""},
		{"cancelled by its upstream", func(t *task.Task) {
			t.DependsOn, t.TriggerRule, t.CancelledBy = []string{"A", "B"}, task.TriggerAllSucceeded, "B"
		}, "all_succeeded", "", "", "B"},
		{"duplicate", func(t *task.Task) {
			t.UniqueKey, t.UniqueWindow, t.DuplicateOf = "customer-42", task.Duration(time.Hour), "HOLDER"
		}, "", "customer-42", "HOLDER", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := snapshot(task.Cancelled, c.mod)
			row := taskRowOf(record{Seq: 9, TaskID: snap.ID, Event: task.Event{Kind: task.KindTransition, To: task.Cancelled, At: at(time.Second), Task: snap}})
			if row.TriggerRule != c.rule || row.UniqueKey != c.key || row.DuplicateOf != c.duplicate || row.CancelledBy != c.upstream {
				t.Fatalf("trigger_rule %q unique_key %q duplicate_of %q cancelled_by %q, want %q %q %q %q",
					row.TriggerRule, row.UniqueKey, row.DuplicateOf, row.CancelledBy, c.rule, c.key, c.duplicate, c.upstream)
			}
		})
	}
}

func TestTaskRowOfShards(t *testing.T) {
	sharding := &task.Sharding{PlanRef: task.PlanRef{Object: "plans/P/EX1", Shards: 12}, Registered: true}
	cases := []struct {
		name          string
		mod           func(*task.Task)
		parent, shard string
	}{
		{"plain task", nil, "", ""},
		{"parent", func(t *task.Task) { t.Shardable, t.Phase, t.Sharding = true, task.PhaseShards, sharding }, "", ""},
		{"shard 0", func(t *task.Task) { t.ID, t.Parent = task.ShardID("P", 0), "P" }, "P", "0"},
		{"shard 11", func(t *task.Task) { t.ID, t.Parent, t.ShardIndex = task.ShardID("P", 11), "P", 11 }, "P", "11"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := snapshot(task.Waiting, c.mod)
			ev := task.Event{Kind: task.KindTransition, To: task.Waiting, At: at(time.Second), Task: snap}
			row := taskRowOf(record{Seq: 7, TaskID: snap.ID, Event: ev})
			if row.ParentID != c.parent || row.ShardID != c.shard {
				t.Fatalf("parent_id %q shard_id %q, want %q %q", row.ParentID, row.ShardID, c.parent, c.shard)
			}
		})
	}
}

func TestBuildBatch(t *testing.T) {
	ready := func(seq uint64, id string, readyAt time.Time, state task.State) record {
		return record{Seq: seq, TaskID: id, Event: task.Event{Kind: task.KindTransition, To: state, At: readyAt,
			Task: snapshot(state, func(t *task.Task) { t.ID = id; t.ReadyAt = ptr(readyAt) })}}
	}
	claim := record{Seq: 4, TaskID: "A", Event: task.Event{Kind: task.KindTransition, From: task.Ready, To: task.Running,
		At: at(3 * time.Second), Task: snapshot(task.Running, func(t *task.Task) { t.ID = "A"; t.ReadyAt = ptr(at(2 * time.Second)) })}}
	// Out of order and with a duplicate delivery of seq 2.
	recs := []record{claim, ready(3, "B", at(time.Second), task.Ready), ready(2, "A", at(2*time.Second), task.Ready),
		ready(2, "A", at(2*time.Second), task.Ready), ready(1, "A", at(0), task.Ready)}
	b := buildBatch(recs)
	var seqs []uint64
	for _, e := range b.events {
		seqs = append(seqs, e.Seq)
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 || seqs[3] != 4 {
		t.Fatalf("event seqs %v", seqs)
	}
	if len(b.tasks) != 2 || b.tasks[0].ID != "A" || b.tasks[1].ID != "B" {
		t.Fatalf("tasks %+v", b.tasks)
	}
	a := b.tasks[0]
	if a.LastSeq != 4 || a.State != "running" || a.ReadyAt == nil || !a.ReadyAt.Equal(at(0).Truncate(time.Microsecond)) {
		t.Fatalf("task A %+v (want newest event, earliest ready_at)", a)
	}
	if len(b.attempts) != 1 || b.attempts[0].Seq != 4 || b.attempts[0].Outcome != OutcomeRunning {
		t.Fatalf("attempts %+v", b.attempts)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	if got := clip.Bytes(s, 5); got != "éé" {
		t.Fatalf("clipBytes %q", got)
	}
	if got := clipRunes(s, 3); got != "ééé" {
		t.Fatalf("clipRunes %q", got)
	}
	if got := clipRunes("abc", 5); got != "abc" {
		t.Fatalf("clipRunes %q", got)
	}
}

func TestMigrationsParse(t *testing.T) {
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 || len(ms[0].Statements) != 3 {
		t.Fatalf("migrations %+v", ms)
	}
	for _, s := range ms[0].Statements {
		if !strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS") || strings.HasSuffix(s, ";") {
			t.Fatalf("statement %q", s)
		}
	}
	if SchemaVersion() != ms[len(ms)-1].Version {
		t.Fatal("SchemaVersion disagrees with the migrations")
	}
}

func TestDecodeRecord(t *testing.T) {
	good := `{"kind":"transition","to":"ready","at":"2026-03-01T12:00:00Z","actor":"o","task":{"id":"T9","type":"x","state":"ready"}}`
	tests := []struct {
		name, subj, data string
		ok               bool
		id               string
	}{
		{"valid", "ax.task.T9", good, true, "T9"},
		{"id from the subject wins", "ax.task.OTHER", good, true, "OTHER"},
		{"not JSON", "ax.task.T9", `{"kind":`, false, ""},
		{"no target state", "ax.task.T9", `{"kind":"transition","task":{"id":"T9"}}`, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeRecord(11, tc.subj, []byte(tc.data))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (r.TaskID != tc.id || r.Seq != 11 || r.Event.To != task.Ready) {
				t.Fatalf("record %+v", r)
			}
		})
	}
}
