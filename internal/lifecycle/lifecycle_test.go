package lifecycle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func env() *Env {
	n := 0
	return &Env{
		Now:            now,
		RetryDelay:     func(a int) time.Duration { return time.Duration(a) * time.Second },
		MaxShards:      100,
		MaxShardsFlag:  "--max-shards",
		NewExecutionID: func() string { n++; return fmt.Sprint("new-", n) },
	}
}

// records returns records of every state with every combination of the
// fields the table reads.
func records() []task.Task {
	var out []task.Task
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	for _, s := range task.States() {
		for _, key := range []string{"", "tenant"} {
			for _, attempt := range []int{0, 1, 3, 6} {
				for _, shape := range []string{"plain", "shards", "aggregate", "parked", "shard", "delayed", "started", "expiring", "expired", "snoozed"} {
					t := task.Task{Spec: task.Spec{ID: "t1", Type: "email", Capability: "email", ConcurrencyKey: key}, State: s, Attempt: attempt,
						ExecutionID: "e1", Executor: "x1", Dispatches: 1}
					t.MaxDispatches = 3
					switch shape {
					case "shards":
						t.Shardable, t.Phase = true, task.PhaseShards
						t.Sharding = &task.Sharding{PlanRef: task.PlanRef{Shards: 3, Aggregate: attempt == 3}}
						t.DependsOn = []string{"p"}
					case "aggregate":
						t.Shardable, t.Phase = true, task.PhaseAggregate
					case "parked":
						t.Parked, t.Parent = true, "p"
					case "shard":
						t.Parent = "p"
					case "delayed":
						t.StartAt = &later
					case "started":
						t.StartAt = &earlier
					case "expiring":
						t.ExpiresAt = &later
					case "expired":
						t.ExpiresAt = &earlier
					case "snoozed":
						t.Snoozed, t.Snoozes = true, 2
					}
					if s.Terminal() {
						t.FinishedAt = &earlier
					}
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// TestEveryUnfinishedTaskHasADurableTrigger: whatever its fields, the
// effects of a waiting, ready or retrying record store its trigger (a
// running one's is its dispatch), and an ended one's effects clean up
// after it and settle its dependents exactly once.
func TestEveryUnfinishedTaskHasADurableTrigger(t *testing.T) {
	for _, r := range records() {
		fx := Effects(nil, &r, now)
		name := fmt.Sprintf("%s attempt %d key %q phase %q parked %v start %v: %v", r.State, r.Attempt, r.ConcurrencyKey, r.Phase, r.Parked, r.StartAt, fx)
		has := func(e Effect) bool { return slices.Contains(fx, e) }
		count := func(es ...Effect) (n int) {
			for _, e := range es {
				if has(e) {
					n++
				}
			}
			return n
		}
		switch r.State {
		case task.Waiting, task.Retrying:
			if !has(ArmWatch) {
				t.Errorf("%s: no watch", name)
			}
		case task.Ready:
			if !slices.Equal(fx, []Effect{Dispatch}) {
				t.Errorf("%s: a ready task's effect is its dispatch alone (it holds its slot)", name)
			}
		case task.Running:
			if len(fx) != 0 {
				t.Errorf("%s: a running task's trigger is its dispatch; no effects", name)
			}
		default:
			if !slices.Equal(fx[:3], []Effect{DisarmTimers, ArmForget, EndFanIn}) {
				t.Errorf("%s: an ended task's timers go and its retention is armed first", name)
			}
			if count(ReleaseDependents, CancelDependents) != 1 {
				t.Errorf("%s: an ended task settles its dependents once", name)
			}
			if has(ReleaseDependents) != (r.State == task.Succeeded) || has(DeadLetter) != (r.State == task.Failed) ||
				has(Revoke) != (r.State == task.Cancelled || r.State == task.Expired) {
				t.Errorf("%s: wrong ending effects", name)
			}
		}
		if has(FreeSlot) != (r.ConcurrencyKey != "" && r.Attempt > 0 && r.State != task.Ready && r.State != task.Running) {
			t.Errorf("%s: a slot frees exactly when an attempt under a key ended", name)
		}
		if r.State == task.Waiting && count(EnsureShards, CheckSlot, ResolveWaiting) != 1 {
			t.Errorf("%s: a waiting task waits for exactly one thing", name)
		}
		if has(ArmStart) != (r.State == task.Waiting && r.Phase != task.PhaseShards && !r.Parked && r.StartAt != nil && r.StartAt.After(now)) {
			t.Errorf("%s: a start timer exactly for a delayed waiting task", name)
		}
		for _, e := range fx {
			if strings.HasPrefix(e.String(), "effect(") {
				t.Errorf("%s: unnamed effect %d", name, e)
			}
		}
	}
}

// event is something that happens to a task, decided on a record.
type event struct {
	name   string
	decide func(r task.Task) Decision
	// fenced: only the record's own execution may move it.
	fenced bool
	// revives: an operator's command that may move an ended task (and
	// start a new attempt series).
	revives bool
}

func events() []event {
	var out []event
	for _, st := range []task.Outcome{task.OutcomeSucceeded, task.OutcomeFailed, task.OutcomeSnoozed, task.OutcomeCancelled} {
		for _, perm := range []bool{false, true} {
			for _, exec := range []string{"e1", "e0"} {
				for _, plan := range []*task.PlanRef{nil, {Shards: 3, Object: task.PlanObject("t1", "e1")}, {Shards: 1000, Object: task.PlanObject("t1", "e1")}} {
					rep := task.Report{ID: "t1", Type: "email", ExecutionID: exec, Executor: "x2", Status: st, Permanent: perm, Error: "boom", Plan: plan, StartedAt: now.Add(-time.Second)}
					out = append(out, event{name: fmt.Sprintf("report %s permanent %v exec %s plan %v", st, perm, exec, plan),
						decide: func(r task.Task) Decision { return Report(&r, 10, &rep, env()) }, fenced: true})
				}
			}
		}
	}
	stale := task.Report{ID: "t1", Type: "email", ExecutionID: "e1", Status: task.OutcomeSucceeded, DispatchRevision: 11}
	out = append(out, event{name: "report read stale", decide: func(r task.Task) Decision { return Report(&r, 10, &stale, env()) }, fenced: true})
	for _, a := range []int{0, 1, 2, 3, 5, 6} {
		out = append(out, event{name: fmt.Sprint("retry due of attempt ", a), decide: func(r task.Task) Decision { return RetryDue(&r, a, env()) }})
	}
	out = append(out,
		event{name: "deadline", decide: func(r task.Task) Decision { return DeadlinePassed(&r, env()) }},
		event{name: "not started e1", decide: func(r task.Task) Decision { return NotStarted(&r, "e1", env()) }, fenced: true},
		event{name: "not started e0", decide: func(r task.Task) Decision { return NotStarted(&r, "e0", env()) }, fenced: true},
		event{name: "cancel", decide: func(r task.Task) Decision { return Cancel(&r, "by request", env()) }},
		event{name: "redispatch e1", decide: func(r task.Task) Decision { return Redispatch(&r, "e1", "lost", env()) }, fenced: true},
		event{name: "redispatch e0", decide: func(r task.Task) Decision { return Redispatch(&r, "e0", "lost", env()) }, fenced: true},
		event{name: "redrive", decide: func(r task.Task) Decision { return Redrive(&r, false, "by hand", env()) }, revives: true},
		event{name: "redrive with dependents", decide: func(r task.Task) Decision { return Redrive(&r, true, "by hand", env()) }, revives: true},
		event{name: "reopen by p", decide: func(r task.Task) Decision {
			r.CancelledBy = "p"
			return Reopen(&r, "p", "redrive of p")
		}, revives: true},
		event{name: "reopen by q", decide: func(r task.Task) Decision { return Reopen(&r, "q", "redrive of q") }, revives: true},
		event{name: "resolve run", decide: func(r task.Task) Decision { return Resolve(&r, task.VerdictRun, "", "", env()) }},
		event{name: "resolve run by p", decide: func(r task.Task) Decision { return Resolve(&r, task.VerdictRun, "p", task.Failed, env()) }},
		event{name: "resolve cancel", decide: func(r task.Task) Decision { return Resolve(&r, task.VerdictCancel, "", "", env()) }},
		event{name: "resolve cancel by p", decide: func(r task.Task) Decision { return Resolve(&r, task.VerdictCancel, "p", task.Failed, env()) }},
		event{name: "resolve wait", decide: func(r task.Task) Decision { return Resolve(&r, task.VerdictWait, "", "", env()) }},
		event{name: "upstream p failed", decide: func(r task.Task) Decision { return UpstreamEnded(&r, "p", task.Failed, env()) }},
		event{name: "upstream missing", decide: func(r task.Task) Decision { return UpstreamMissing(&r, "p", time.Minute, env()) }},
		event{name: "shards ended 3 of 3", decide: func(r task.Task) Decision { return ShardsEnded(&r, 3, 3, "s", env()) }},
		event{name: "shards ended 1 of 3", decide: func(r task.Task) Decision { return ShardsEnded(&r, 1, 3, "s", env()) }},
		event{name: "shards failed", decide: func(r task.Task) Decision { return ShardsFailed(&r, "s", "a shard failed", env()) }},
	)
	return out
}

// TestDecisionsFollowTheTable: every decision on every record moves only
// along the state table (task.CanTransition), keeps the task's identity,
// fences by execution, ends with a finish time, readies under a new
// execution, and never moves an ended task.
func TestDecisionsFollowTheTable(t *testing.T) {
	applied := map[string]bool{}
	for _, r := range records() {
		for _, ev := range events() {
			r := r
			before := fmt.Sprintf("%+v", r)
			d := ev.decide(r)
			if fmt.Sprintf("%+v", r) != before {
				t.Fatalf("%s on %s: the record read was changed", ev.name, r.State)
			}
			name := fmt.Sprintf("%s on %s (attempt %d, phase %q): %s %q", ev.name, r.State, r.Attempt, r.Phase, d.Verdict, d.Reason)
			if (d.Verdict == Stale || d.Verdict == Refuse) != (d.Err != nil) {
				t.Errorf("%s: an error exactly with stale and refuse (%v)", name, d.Err)
			}
			if d.Verdict != Apply {
				continue
			}
			n := d.Next
			applied[fmt.Sprint(r.State, "→", n.State)] = true
			switch {
			case !task.CanTransition(r.State, n.State):
				t.Errorf("%s: %s → %s is not in the table", name, r.State, n.State)
			case r.State.Terminal() && !ev.revives:
				t.Errorf("%s: an ended task moved", name)
			case n.ID != r.ID || n.Type != r.Type || n.Capability != r.Capability:
				t.Errorf("%s: the task's identity changed", name)
			case d.Reason == "":
				t.Errorf("%s: no reason", name)
			case n.State.Terminal() != (n.FinishedAt != nil):
				t.Errorf("%s: finish time %v in %s", name, n.FinishedAt, n.State)
			case n.State == task.Retrying && (n.RetryAt == nil || n.RetryAt.Before(now)):
				t.Errorf("%s: retrying without a retry time", name)
			case n.State == task.Ready && (n.ExecutionID == r.ExecutionID || n.DispatchRevision != 0 || n.ReadyAt == nil):
				t.Errorf("%s: ready without a new execution", name)
			// Attempts only grow, one at a time, except: a snooze runs
			// the same attempt again; a re-drive and a release from
			// waiting (an aggregator after its shards) start a series.
			case n.Attempt < r.Attempt && !(n.Snoozed && n.Attempt == r.Attempt-1) && !((ev.revives || r.State == task.Waiting) && n.Attempt <= 1):
				t.Errorf("%s: attempt %d → %d", name, r.Attempt, n.Attempt)
			case n.Attempt > r.Attempt+1 && !ev.revives && r.State != task.Waiting:
				t.Errorf("%s: attempt %d → %d skips", name, r.Attempt, n.Attempt)
			}
			if n.State == task.Succeeded && r.Phase == task.PhaseShards && n.Result == nil {
				t.Errorf("%s: a parent succeeded without its shards' summary", name)
			}
			if n.State == task.Cancelled && strings.Contains(ev.name, " by p") != (n.CancelledBy == "p") && !strings.HasPrefix(ev.name, "upstream p") {
				t.Errorf("%s: cancelled by %q", name, n.CancelledBy)
			}
			if ev.fenced && strings.Contains(ev.name, "e0") {
				t.Errorf("%s: another execution moved the task", name)
			}
			if strings.Contains(ev.name, "stale") {
				t.Errorf("%s: decided on a stale read", name)
			}
		}
	}
	// The events reach the table's edges the executors and timers drive.
	for _, edge := range []string{"ready→succeeded", "running→succeeded", "running→retrying", "running→failed", "running→waiting",
		"running→cancelled", "running→expired", "retrying→ready", "ready→ready", "ready→failed", "waiting→cancelled", "retrying→expired", "failed→ready", "cancelled→waiting", "waiting→ready", "waiting→failed", "waiting→succeeded"} {
		if !applied[edge] {
			t.Errorf("no event moved a task %s", edge)
		}
	}
}

// TestReportOutcomes: what each report makes of a running attempt.
func TestReportOutcomes(t *testing.T) {
	running := task.Task{Spec: task.Spec{ID: "t1", Type: "email", Capability: "email"}, State: task.Running, Attempt: 2, ExecutionID: "e1"}
	d2 := task.Duration(time.Minute)
	for _, c := range []struct {
		name   string
		r      task.Report
		on     func(task.Task) task.Task
		state  task.State
		reason string
	}{
		{name: "success", r: task.Report{Status: task.OutcomeSucceeded, Result: []byte(`1`)}, state: task.Succeeded, reason: "attempt 2 succeeded"},
		{name: "failure", r: task.Report{Status: task.OutcomeFailed, Error: "boom"}, state: task.Retrying, reason: "attempt 2 failed: boom; retry in 2s"},
		{name: "failure, retry after", r: task.Report{Status: task.OutcomeFailed, Error: "429", RetryAfter: &d2}, state: task.Retrying, reason: "retry in 1m0s"},
		{name: "permanent", r: task.Report{Status: task.OutcomeFailed, Permanent: true, Error: "bad"}, state: task.Failed, reason: "attempt 2 failed permanently: bad"},
		{name: "last attempt", r: task.Report{Status: task.OutcomeFailed, Error: "boom"}, on: func(t task.Task) task.Task { t.Attempt = 6; return t },
			state: task.Failed, reason: "retries exhausted after 6 attempts"},
		{name: "past the deadline", r: task.Report{Status: task.OutcomeFailed, Error: "boom"},
			on:    func(t task.Task) task.Task { e := now.Add(-time.Second); t.ExpiresAt = &e; return t },
			state: task.Expired, reason: "passed while running"},
		{name: "snooze", r: task.Report{Status: task.OutcomeSnoozed, RetryAfter: &d2}, state: task.Retrying, reason: "attempt 2 snoozed for 1m0s (snooze 1 of at most 100)"},
		{name: "snooze over the cap", r: task.Report{Status: task.OutcomeSnoozed}, on: func(t task.Task) task.Task { t.Snoozes = task.MaxSnoozes; return t },
			state: task.Retrying, reason: "snoozed 100 times in this attempt series; the limit is 100"},
		{name: "cancel by the handler", r: task.Report{Status: task.OutcomeCancelled, Error: "order withdrawn"}, state: task.Cancelled,
			reason: "cancelled by its handler in attempt 2: order withdrawn"},
		{name: "inline result over the limit", r: task.Report{Status: task.OutcomeSucceeded, Result: make([]byte, task.InlineResultLimit+1)},
			state: task.Failed, reason: "inline result is over the"},
		{name: "a result object of another attempt", r: task.Report{Status: task.OutcomeSucceeded, ResultObject: task.ResultObjectName("t1", "e0")},
			state: task.Failed, reason: "is not this attempt's"},
		{name: "a planner without a plan", r: task.Report{Status: task.OutcomeSucceeded}, on: func(t task.Task) task.Task { t.Shardable = true; return t },
			state: task.Failed, reason: "plan rejected: the planner reported no plan"},
		{name: "a plan over the limit", r: task.Report{Status: task.OutcomeSucceeded, Plan: &task.PlanRef{Shards: 101, Object: task.PlanObject("t1", "e1")}},
			on: func(t task.Task) task.Task { t.Shardable = true; return t }, state: task.Failed, reason: "the limit is 100 (--max-shards)"},
		{name: "a plan", r: task.Report{Status: task.OutcomeSucceeded, Plan: &task.PlanRef{Shards: 3, Object: task.PlanObject("t1", "e1")}},
			on: func(t task.Task) task.Task { t.Shardable = true; return t }, state: task.Waiting, reason: "attempt 2 planned 3 shards"},
	} {
		rec := running
		if c.on != nil {
			rec = c.on(rec)
		}
		c.r.ID, c.r.Type, c.r.ExecutionID = "t1", "email", "e1"
		d := Report(&rec, 1, &c.r, env())
		if d.Verdict != Apply || d.Next.State != c.state || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s: %s %s %q, want %s with %q", c.name, d.Verdict, d.Next.State, d.Reason, c.state, c.reason)
		}
	}
	snoozed := Report(&running, 1, &task.Report{ID: "t1", Type: "email", ExecutionID: "e1", Status: task.OutcomeSnoozed, RetryAfter: &d2}, env()).Next
	if snoozed.Attempt != 1 || snoozed.Snoozes != 1 || !snoozed.Snoozed || !snoozed.RetryAt.Equal(now.Add(time.Minute)) || len(snoozed.Errors) != 0 {
		t.Errorf("a snooze runs the same attempt again, counting no failure: %+v", snoozed)
	}
	if d := Report(&running, 1, &task.Report{ID: "t1", Type: "sms", ExecutionID: "e1", Status: task.OutcomeSucceeded}, env()); d.Verdict != Ignore || d.Warning == "" {
		t.Errorf("a report naming another type: %s, warning %q", d.Verdict, d.Warning)
	}
	if d := Report(&running, 1, &task.Report{ID: "t1", Type: "email", ExecutionID: "e1", Status: task.OutcomeSucceeded,
		ResultObject: task.ResultObjectName("t1", "e0")}, env()); d.Warning == "" {
		t.Error("a report refused for its objects is not flagged for the operator")
	}
}

// What the orchestrator accepts of the objects a report names.
func TestObjectRefProblem(t *testing.T) {
	own, name := subject.ObjectBucket("email"), task.ResultObjectName("a", "e1")
	digest := object.Digest([]byte("x"))
	for _, c := range []struct {
		what, name, bucket, digest string
		want                       string // "" accepted, else a part of the reason
	}{
		{"own store with digest", name, own, digest, ""},
		{"legacy store, no digest", name, "", "", ""},
		{"legacy store with digest", name, "", digest, ""},
		{"legacy store, bad digest", name, "", "sha256:x", "invalid digest"},
		{"another task", task.ResultObjectName("b", "e1"), own, digest, "is not this attempt's"},
		{"another attempt", task.ResultObjectName("a", "e0"), own, digest, "is not this attempt's"},
		{"a plan's name", task.PlanObject("a", "e1"), own, digest, "is not this attempt's"},
		{"another capability's store", name, subject.ObjectBucket("pdf"), digest, "not in " + own},
		{"the legacy store named", name, subject.BucketObjects, digest, "not in " + own},
		{"no digest", name, own, "", "no valid digest"},
		{"digest of another form", name, own, "SHA-256=abc", "no valid digest"},
	} {
		got := ObjectRefProblem("result object", c.name, name, c.bucket, c.digest, "email")
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}

// TestClaims: who may mark an attempt running, and when a claim takes an
// attempt over.
func TestClaims(t *testing.T) {
	ready := task.Task{Spec: task.Spec{ID: "t1", Capability: "email"}, State: task.Ready, ExecutionID: "e1", Attempt: 1}
	running := ready.Claimed("x1", now.Add(-time.Minute))
	ended := running
	ended.State = task.Succeeded
	req := func(exec, executor string, delivered uint64, mark bool) task.ClaimRequest {
		return task.ClaimRequest{ID: "t1", ExecutionID: exec, Executor: executor, Delivered: delivered, Mark: mark, Revision: 5}
	}
	for _, c := range []struct {
		name     string
		rec      task.Task
		rev      uint64
		capab    string
		req      task.ClaimRequest
		verdict  Verdict
		status   task.ClaimStatus
		takeOver bool
	}{
		{"first claim", ready, 5, "email", req("e1", "x1", 1, false), Apply, task.ClaimGranted, false},
		{"a stale read", ready, 4, "email", req("e1", "x1", 1, false), Stale, "", false},
		{"another capability", ready, 5, "sms", req("e1", "x1", 1, false), Refuse, task.ClaimEnded, false},
		{"another execution", ready, 5, "email", req("e0", "x1", 1, false), Ignore, task.ClaimEnded, false},
		{"its execution ended", ended, 5, "email", req("e1", "x1", 1, false), Replay, task.ClaimEnded, false},
		{"a mark again", running, 5, "email", req("e1", "x1", 1, true), Ignore, task.ClaimGranted, false},
		{"a mark elsewhere", running, 5, "email", req("e1", "x2", 1, true), Ignore, task.ClaimRunningElsewhere, false},
		{"a redelivery", running, 5, "email", req("e1", "x2", 2, false), Apply, task.ClaimGranted, true},
		{"a first delivery, running", running, 5, "email", req("e1", "x2", 1, false), Ignore, task.ClaimRunningElsewhere, false},
	} {
		d := Claim(&c.rec, c.rev, c.capab, &c.req, env())
		if d.Verdict != c.verdict || d.Status != c.status || d.TakeOver != c.takeOver {
			t.Errorf("%s: %s %s takeover %v, want %s %s %v", c.name, d.Verdict, d.Status, d.TakeOver, c.verdict, c.status, c.takeOver)
		}
		if d.Verdict == Apply && (d.Next.State != task.Running || d.Next.Executor != c.req.Executor || !task.CanTransition(c.rec.State, task.Running)) {
			t.Errorf("%s: %+v", c.name, d.Next)
		}
		if d.TakeOver && d.Next.Takeovers != c.rec.Takeovers+1 {
			t.Errorf("%s: a takeover is counted", c.name)
		}
	}
	future := task.ClaimRequest{ID: "t1", ExecutionID: "e1", Executor: "x1", StartedAt: now.Add(time.Hour)}
	if d := Claim(&ready, 5, "email", &future, env()); !d.Next.StartedAt.Equal(now) {
		t.Errorf("a start time ahead of the orchestrator's clock: %v", d.Next.StartedAt)
	}
}

// TestCommands: what re-drives and re-opens refuse, and what they reset.
func TestCommands(t *testing.T) {
	failed := task.Task{Spec: task.Spec{ID: "t1"}, State: task.Failed, Attempt: 6, Snoozes: 3, Errors: []task.AttemptError{{Error: "boom"}}}
	d := Redrive(&failed, false, "by hand", env())
	if d.Verdict != Apply || d.Next.State != task.Ready || d.Next.Attempt != 1 || d.Next.Redrives != 1 || d.Next.Errors != nil || d.Next.Snoozes != 0 {
		t.Errorf("re-drive: %s %+v", d.Verdict, d.Next)
	}
	shard := failed
	shard.Parent = "p"
	if d := Redrive(&shard, false, "", env()); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "shards run again only with their parent") {
		t.Errorf("re-drive of a shard: %s %v", d.Verdict, d.Err)
	}
	inShards := failed
	inShards.Phase = task.PhaseShards
	if d := Redrive(&inShards, false, "", env()); d.Verdict != Refuse {
		t.Errorf("re-drive in the shard phase: %s", d.Verdict)
	}
	again := d.Next
	if d := Redrive(&again, true, "", env()); d.Verdict != Ignore {
		t.Errorf("a re-drive with dependents asked again re-opens only: %s", d.Verdict)
	}
	if d := Redrive(&again, false, "", env()); d.Verdict != Refuse || !strings.Contains(d.Err.Error(), "only failed tasks") {
		t.Errorf("re-drive of a ready task: %s %v", d.Verdict, d.Err)
	}
	old := task.Task{Spec: task.Spec{ID: "c"}, State: task.Cancelled, Reason: "upstream p is failed"}
	if d := Reopen(&old, "p", "x"); d.Verdict != Apply || d.Next.State != task.Waiting || d.Next.FinishedAt != nil {
		t.Errorf("a dependent cancelled before CancelledBy existed is re-opened by its reason: %s", d.Verdict)
	}
	if d := Reopen(&old, "q", "x"); d.Verdict != Ignore {
		t.Errorf("another upstream's re-drive re-opened it: %s", d.Verdict)
	}
	if d := Cancel(&failed, "", env()); d.Verdict != Refuse {
		t.Errorf("cancel of an ended task: %s", d.Verdict)
	}
}

// TestCreate: a new task's first state, and that admission is asked only
// for a task that would be dispatched at once.
func TestCreate(t *testing.T) {
	later, earlier := now.Add(time.Hour), now.Add(-time.Second)
	for _, c := range []struct {
		name    string
		t       task.Task
		dupOf   string
		admit   bool
		state   task.State
		reason  string
		askedIn bool
	}{
		{name: "plain", t: task.Task{}, admit: true, state: task.Ready, reason: "submitted", askedIn: true},
		{name: "held by a breaker", t: task.Task{}, admit: false, state: task.Waiting, reason: "submitted", askedIn: true},
		{name: "with dependencies", t: task.Task{Spec: task.Spec{DependsOn: []string{"p"}}}, admit: true, state: task.Waiting, reason: "submitted"},
		{name: "delayed", t: task.Task{StartAt: &later}, admit: true, state: task.Waiting, reason: "scheduled for"},
		{name: "start time passed", t: task.Task{StartAt: &earlier}, admit: true, state: task.Ready, reason: "submitted", askedIn: true},
		{name: "deadline passed", t: task.Task{ExpiresAt: &earlier}, admit: true, state: task.Expired, reason: "had passed at submission"},
		{name: "duplicate", t: task.Task{}, dupOf: "other", admit: true, state: task.Cancelled, reason: "held by other"},
	} {
		asked := false
		rec := c.t
		rec.ID = "t1"
		d := Create(&rec, c.dupOf, "held by "+c.dupOf, func() bool { asked = true; return c.admit }, env())
		if d.Verdict != Apply || d.Next.State != c.state || !strings.Contains(d.Reason, c.reason) || asked != c.askedIn ||
			!task.CanTransition("", d.Next.State) || d.Next.State.Terminal() != (d.Next.FinishedAt != nil) {
			t.Errorf("%s: %s %s %q (admission asked %v)", c.name, d.Verdict, d.Next.State, d.Reason, asked)
		}
		if c.dupOf != "" && d.Next.DuplicateOf != c.dupOf {
			t.Errorf("%s: duplicate of %q", c.name, d.Next.DuplicateOf)
		}
		if d.Next.State == task.Ready && (d.Next.Attempt != 1 || d.Next.ExecutionID == "") {
			t.Errorf("%s: ready without its first execution: %+v", c.name, d.Next)
		}
	}
}

// TestCancelledByCascade: a dependent counts as ended by an upstream's
// cascade when that upstream's end cancelled it (named, or by its reason
// from before CancelledBy), or when all its upstreams together did under
// any_failed; not when it ended otherwise or by another upstream.
func TestCancelledByCascade(t *testing.T) {
	waiting := task.Task{Spec: task.Spec{ID: "y", DependsOn: []string{"up", "other"}}, State: task.Waiting}
	written := func(d Decision) task.Task { // the record as written: its reason is the decision's
		next := d.Next
		next.Reason = d.Reason
		return next
	}
	byUp := written(UpstreamEnded(&waiting, "up", task.Failed, env()))
	byOther := written(UpstreamEnded(&waiting, "other", task.Failed, env()))
	anyFailed := waiting
	anyFailed.TriggerRule = task.TriggerAnyFailed
	noneFailed := written(Resolve(&anyFailed, task.VerdictCancel, "", "", env()))
	legacy := byUp
	legacy.CancelledBy = ""
	operator := written(Cancel(&waiting, "cancelled by an operator", env()))
	for _, c := range []struct {
		name string
		t    task.Task
		want bool
	}{
		{"cancelled by up", byUp, true},
		{"cancelled by up, before CancelledBy", legacy, true},
		{"cancelled by all its upstreams (any_failed)", noneFailed, true},
		{"cancelled by another upstream", byOther, false},
		{"cancelled by an operator", operator, false},
		{"still waiting", waiting, false},
	} {
		if got := CancelledByCascade(&c.t, "up"); got != c.want {
			t.Errorf("%s (%s, by %q, %q): %v, want %v", c.name, c.t.State, c.t.CancelledBy, c.t.Reason, got, c.want)
		}
	}
	noneFailed.DependsOn = []string{"other"}
	if CancelledByCascade(&noneFailed, "up") {
		t.Error("an any_failed dependent of other upstreams counts as ended by up")
	}
}
