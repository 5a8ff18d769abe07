package lifecycle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

func runningForSteps() task.Task {
	return task.Task{Spec: task.Spec{ID: "t1", Type: "email", Capability: "email"}, State: task.Running, Attempt: 2,
		ExecutionID: "e1", Executor: "x1", Takeovers: 1}
}

func stepReport(name string, result string) task.Report {
	return task.Report{ID: "t1", Type: "email", ExecutionID: "e1", Attempt: 2, Executor: "x1", Takeovers: 1,
		Status: task.OutcomeStep, Step: name, Result: json.RawMessage(result)}
}

// TestStepFencing: only the attempt running now, on its executor, stores
// a step; a zombie of a taken-over attempt, a superseded execution and an
// ended task are refused as lost; a stale read is read again.
func TestStepFencing(t *testing.T) {
	cur := runningForSteps()
	cases := []struct {
		name    string
		rec     func(*task.Task)
		rep     func(*task.Report)
		rev     uint64
		verdict Verdict
		lost    bool
	}{
		{"current attempt", nil, nil, 10, Apply, false},
		{"ready, not marked yet", func(t *task.Task) { t.State, t.Executor, t.Takeovers = task.Ready, "", 0 }, func(r *task.Report) { r.Takeovers = 0 }, 10, Apply, false},
		{"zombie after a take-over", nil, func(r *task.Report) { r.Executor, r.Takeovers = "x0", 0 }, 10, Refuse, true},
		{"taken over by another with the same count", func(t *task.Task) { t.Executor = "x2" }, nil, 10, Refuse, true},
		{"takeovers differ", nil, func(r *task.Report) { r.Takeovers = 2 }, 10, Refuse, true},
		{"superseded execution", func(t *task.Task) { t.ExecutionID = "e2" }, nil, 10, Refuse, true},
		{"task ended", func(t *task.Task) { t.State = task.Succeeded }, nil, 10, Refuse, true},
		{"another type", nil, func(r *task.Report) { r.Type = "sms" }, 10, Refuse, false},
		{"stale read", nil, func(r *task.Report) { r.StepRevision = 11 }, 10, Stale, false},
	}
	for _, c := range cases {
		rec, r := cur, stepReport("charge", `42`)
		if c.rec != nil {
			c.rec(&rec)
		}
		if c.rep != nil {
			c.rep(&r)
		}
		d := Step(&rec, c.rev, &r, env())
		if d.Verdict != c.verdict || d.Lost != c.lost {
			t.Errorf("%s: verdict %s lost %v (%v); want %s lost %v", c.name, d.Verdict, d.Lost, d.Err, c.verdict, c.lost)
		}
		if d.Verdict == Apply && (len(d.Next.Steps) != 1 || d.Next.Steps[0].Name != "charge" || string(d.Next.Steps[0].Result) != "42" ||
			d.Next.State != rec.State || d.Next.Steps[0].ExecutionID != "e1") {
			t.Errorf("%s: next %+v", c.name, d.Next)
		}
	}
}

// TestStepStoredOnceFirstResultStands: a step stored already is returned
// as stored (the first result), whatever the second report says.
func TestStepStoredOnceFirstResultStands(t *testing.T) {
	rec := runningForSteps()
	r := stepReport("charge", `1`)
	d := Step(&rec, 10, &r, env())
	if d.Verdict != Apply {
		t.Fatal(d.Err)
	}
	r2 := stepReport("charge", `2`)
	d2 := Step(&d.Next, 11, &r2, env())
	if d2.Verdict != Ignore || string(d2.Step.Result) != "1" {
		t.Fatalf("again: %s %s", d2.Verdict, d2.Step.Result)
	}
}

// TestStepLimitsRefused: names, the count, inline sizes and objects are
// checked whatever the executor did, with a reason naming the limit.
func TestStepLimitsRefused(t *testing.T) {
	full := runningForSteps()
	for i := range task.MaxSteps {
		full.Steps = append(full.Steps, task.Step{Name: strings.Repeat("s", i+1)})
	}
	heavy := runningForSteps()
	heavy.Steps = []task.Step{{Name: "a", Result: json.RawMessage(`"` + strings.Repeat("x", task.StepsInlineTotal-100) + `"`)}}
	good := task.StepObjectName("t1", "e1", "big")
	digest := object.Digest([]byte("x"))
	cases := []struct {
		name string
		rec  task.Task
		rep  func(*task.Report)
		want string
	}{
		{"empty name", runningForSteps(), func(r *task.Report) { r.Step = "" }, "needs a name"},
		{"long name", runningForSteps(), func(r *task.Report) { r.Step = strings.Repeat("n", 129) }, "the limit is 128"},
		{"control character", runningForSteps(), func(r *task.Report) { r.Step = "a\nb" }, "control character"},
		{"reserved", runningForSteps(), func(r *task.Report) { r.Step = "ax:sleep:1" }, "reserves"},
		{"too many", full, nil, "the limit is 100"},
		{"inline too large", runningForSteps(), func(r *task.Report) {
			r.Result = json.RawMessage(`"` + strings.Repeat("x", task.StepInlineLimit) + `"`)
		}, "its inline result is"},
		{"inline total", heavy, func(r *task.Report) { r.Result = json.RawMessage(`"` + strings.Repeat("x", 200) + `"`) }, "inline step results would take"},
		{"another attempt's object", runningForSteps(), func(r *task.Report) {
			r.Result, r.ResultObject, r.ResultBucket, r.ResultDigest = nil, task.StepObjectName("t1", "e0", "charge"), subject.ObjectBucket("email"), digest
		}, "is not this attempt's"},
		{"another store", runningForSteps(), func(r *task.Report) {
			r.Step, r.Result, r.ResultObject, r.ResultBucket, r.ResultDigest = "big", nil, good, subject.ObjectBucket("sms"), digest
		}, "not in AX_OBJECTS_email"},
		{"no store", runningForSteps(), func(r *task.Report) {
			r.Step, r.Result, r.ResultObject, r.ResultDigest = "big", nil, good, digest
		}, "names no object store"},
	}
	for _, c := range cases {
		r := stepReport("charge", `1`)
		if c.rep != nil {
			c.rep(&r)
		}
		d := Step(&c.rec, 10, &r, env())
		if d.Verdict != Refuse || d.Lost || d.Err == nil || !strings.Contains(d.Err.Error(), c.want) {
			t.Errorf("%s: %s lost %v %v; want refused with %q", c.name, d.Verdict, d.Lost, d.Err, c.want)
		}
	}
	r := stepReport("big", "")
	r.Result, r.ResultObject, r.ResultBucket, r.ResultDigest = nil, good, subject.ObjectBucket("email"), digest
	rec := runningForSteps()
	if d := Step(&rec, 10, &r, env()); d.Verdict != Apply || d.Next.Steps[0].ResultObject != good {
		t.Fatalf("object step: %s %v", d.Verdict, d.Err)
	}
}

// TestSleepReport: a sleeping report makes the task retrying (snoozed)
// until the sleep's end under the same attempt number, stores the sleep,
// spends no snooze and records no error; the retry timer's firing runs the
// attempt again saying the sleep is over. A sleep over the limit fails the
// attempt permanently.
func TestSleepReport(t *testing.T) {
	rec := runningForSteps()
	d30 := task.Duration(30 * time.Second)
	r := task.Report{ID: "t1", Type: "email", ExecutionID: "e1", Attempt: 2, Executor: "x1", Takeovers: 1,
		Status: task.OutcomeSleeping, Step: task.SleepName(1), RetryAfter: &d30}
	d := Report(&rec, 10, &r, env())
	n := d.Next
	if d.Verdict != Apply || n.State != task.Retrying || !n.Snoozed || n.Snoozes != 0 || n.Attempt != 1 || len(n.Errors) != 0 ||
		!n.RetryAt.Equal(now.Add(30*time.Second)) || len(n.Steps) != 1 || !n.Steps[0].SleepUntil.Equal(*n.RetryAt) {
		t.Fatalf("sleep: %s %+v", d.Reason, n)
	}
	if !strings.Contains(d.Reason, "attempt 2 sleeping for 30s") {
		t.Fatalf("reason %q", d.Reason)
	}
	w := RetryDue(&n, 1, env())
	if w.Verdict != Apply || w.Next.State != task.Ready || w.Next.Attempt != 2 || w.Next.Snoozed || w.Reason != "ax:sleep:1 over; attempt 2 runs again" {
		t.Fatalf("wake: %s %q %+v", w.Verdict, w.Reason, w.Next)
	}
	long := task.Duration(task.MaxSleep + time.Hour)
	r.RetryAfter = &long
	d = Report(&rec, 10, &r, env())
	if d.Next.State != task.Failed || !strings.Contains(d.Reason, "over the limit") {
		t.Fatalf("long sleep: %s %q", d.Next.State, d.Reason)
	}
}
