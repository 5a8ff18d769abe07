package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// dagTimeout bounds each wait of TestDAGKill9, generously: a killed
// orchestrator's unacknowledged messages come back only after their ack
// wait, and the machine may be loaded.
const dagTimeout = 4 * time.Minute

// dagTask is one task of TestDAGKill9's graph and how it must end.
type dagTask struct {
	spec task.Spec
	// ran says the task's handler runs exactly once (one claim, one
	// running -> end transition); otherwise it never runs.
	ran bool
}

// TestDAGKill9 runs a DAG that uses the issue-14 features against real
// ax processes, killing the orchestrator with SIGKILL twice while work is
// in flight:
//
//   - results flow down the DAG: demo.gather dependents read their
//     upstreams' results (executor.Job.Inputs) in a worker process, and
//     `ax status -o json` shows a task's inputs;
//   - trigger rules: a cleanup step (any_failed) after a failing step
//     runs, a final all_ended step runs after a cancelled upstream, and a
//     default dependent of the failing step is cancelled naming it
//     (cancelled_by);
//   - unique keys: a second and a third submission with the first one's
//     unique_key, one sent while no orchestrator runs, are created
//     cancelled as duplicates of it and never run;
//   - re-drive with dependents: a step that failed because no worker
//     served its capability is re-driven with `ax redrive
//     --with-dependents` once a worker does; the two levels of dependents
//     its failure cancelled are re-opened under the same ids and each runs
//     once, while its any_failed cleanup, which already ran, does not run
//     again;
//   - the MySQL audit mirror, run inside the orchestrators (killed with
//     them), ends with the same story: trigger rules, duplicate_of,
//     cancelled_by (cleared on re-open) and one attempt per run.
func TestDAGKill9(t *testing.T) {
	c := newCluster(t)
	dsn, db := mirrortest.DB(t)
	c.startServer()
	_, cl := c.connect()
	orchArgs := append([]string{"--mysql-dsn", dsn}, noBreakers...)
	o1 := c.startOrchestrator("orch-1", orchArgs...)
	c.startWorker("worker-1", "--ack-wait", "5s", "--capacity", "8")
	warmUp(t, cl, "default")

	sleep := func(id, d string, deps ...string) task.Spec {
		s, err := task.New(demo.TypeSleep, demo.Params{Sleep: d, Label: id})
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.DependsOn = id, deps
		return s
	}
	gather := func(id string, rule task.TriggerRule, deps ...string) task.Spec {
		s, err := task.New(demo.TypeGather, demo.Params{Label: id})
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.DependsOn, s.TriggerRule = id, deps, rule
		return s
	}
	other := func(id, typ string, rule task.TriggerRule, deps ...string) task.Spec {
		s, err := task.New(typ, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.DependsOn, s.TriggerRule = id, deps, rule
		return s
	}
	broken := other("broken", demo.TypeFail, "", "src-a")
	broken.MaxRetries = new(0)
	// gate fails when nobody serves its capability: two dispatches no
	// worker starts, then failed (no retry).
	gate := sleep("gate", "3s", "src-a")
	gate.Capability = "late"
	gate.DispatchTimeout = task.Duration(5 * time.Second)
	gate.MaxDispatches = 2
	gate.MaxRetries = new(0)
	uniq := func(id string) task.Spec {
		s := sleep(id, "1s")
		s.UniqueKey, s.UniqueWindow = "customer-42", task.Duration(time.Hour)
		return s
	}

	graph := []dagTask{
		{spec: sleep("src-a", "3s"), ran: true},
		{spec: sleep("src-b", "6s"), ran: true},
		{spec: gather("gather", "", "src-a", "src-b"), ran: true},
		{spec: broken, ran: true},
		{spec: other("after-broken", demo.TypeNoop, "", "broken")},
		{spec: gather("cleanup", task.TriggerAnyFailed, "broken"), ran: true},
		{spec: gather("final", task.TriggerAllEnded, "gather", "after-broken", "cleanup"), ran: true},
		{spec: gate, ran: true},
		{spec: gather("gated-1", "", "gate", "src-b"), ran: true},
		{spec: gather("gated-2", "", "gated-1"), ran: true},
		{spec: other("gate-cleanup", demo.TypeNoop, task.TriggerAnyFailed, "gate"), ran: true},
		{spec: other("never-cleanup", demo.TypeNoop, task.TriggerAnyFailed, "src-a"), ran: false},
		{spec: uniq("uniq-1"), ran: true},
		{spec: uniq("uniq-2")},
		{spec: uniq("uniq-3")},
	}
	specs := make(map[string]task.Spec, len(graph))
	for _, g := range graph {
		specs[g.spec.ID] = g.spec
	}

	// The unique key's holder first, known to the orchestrator before
	// the kill; then the graph.
	retryOp(t, dagTimeout, "submit uniq-1", func(ctx context.Context) error {
		_, err := cl.Submit(ctx, specs["uniq-1"])
		return err
	})
	waitFor(t, cl, "uniq-1", "accepted", func(*task.Task) bool { return true })
	var dag []task.Spec
	for _, g := range graph {
		if !strings.HasPrefix(g.spec.ID, "uniq-") {
			dag = append(dag, g.spec)
		}
	}
	retryOp(t, dagTimeout, "submit the graph", func(ctx context.Context) error {
		_, err := cl.SubmitGraph(ctx, dag)
		return err
	})

	// Kill -9 while src-a and src-b run; the second unique submission
	// arrives while no orchestrator runs.
	waitFor(t, cl, "src-b", "running", func(got *task.Task) bool {
		return got.State == task.Running || got.State == task.Succeeded
	})
	o1.kill9()
	t.Logf("killed orch-1 with -9 while the graph ran: src-b was %s", get(t, cl, "src-b").State)
	retryOp(t, dagTimeout, "submit uniq-2", func(ctx context.Context) error {
		_, err := cl.Submit(ctx, specs["uniq-2"])
		return err
	})
	o2 := c.startOrchestrator("orch-2", orchArgs...)

	// Every task but gate's dependents reaches its end.
	for id, want := range map[string]task.State{
		"src-a": task.Succeeded, "src-b": task.Succeeded, "gather": task.Succeeded,
		"broken": task.Failed, "after-broken": task.Cancelled, "cleanup": task.Succeeded, "final": task.Succeeded,
		"gate": task.Failed, "gated-1": task.Cancelled, "gated-2": task.Cancelled, "gate-cleanup": task.Succeeded,
		"never-cleanup": task.Cancelled, "uniq-1": task.Succeeded, "uniq-2": task.Cancelled,
	} {
		waitFor(t, cl, id, string(want), func(got *task.Task) bool { return got.State == want })
	}
	for id, by := range map[string]string{"after-broken": "broken", "gated-1": "gate", "gated-2": "gated-1"} {
		if got := get(t, cl, id); got.CancelledBy != by {
			t.Errorf("%s: cancelled_by %q (%s), want %q", id, got.CancelledBy, got.Reason, by)
		}
	}

	// A worker for gate's capability comes; re-drive gate with its
	// dependents, and kill the orchestrator again while gate runs.
	c.startWorker("worker-late", "--ack-wait", "5s", "--capabilities", "late")
	warmUp(t, cl, "late")
	out, err := exec.Command(axBin, "redrive", "gate", "--with-dependents", "--by", "e2e-operator",
		"--reason", "worker for late is up", "--nats", c.url).CombinedOutput()
	if err != nil {
		t.Fatalf("ax redrive gate --with-dependents: %v\n%s", err, out)
	}
	waitFor(t, cl, "gate", "running again", func(got *task.Task) bool {
		return got.State == task.Running || got.State == task.Succeeded
	})
	o2.kill9()
	t.Logf("killed orch-2 with -9 after the re-drive of gate")
	retryOp(t, dagTimeout, "submit uniq-3", func(ctx context.Context) error {
		_, err := cl.Submit(ctx, specs["uniq-3"])
		return err
	})
	c.startOrchestrator("orch-3", orchArgs...)
	for _, id := range []string{"gate", "gated-1", "gated-2"} {
		waitFor(t, cl, id, "succeeded", func(got *task.Task) bool { return got.State == task.Succeeded })
	}
	waitFor(t, cl, "uniq-3", "cancelled", func(got *task.Task) bool { return got.State == task.Cancelled })

	// Every task ran exactly as often as it should.
	final := make(map[string]*task.Task)
	for _, g := range graph {
		id := g.spec.ID
		got := get(t, cl, id)
		final[id] = got
		h := history(t, cl, id)
		marks := countTransitions(h, task.Ready, task.Running)
		ends := countAttemptEnds(h, task.Succeeded, task.Failed)
		switch {
		case !g.ran && (marks != 0 || ends != 0):
			t.Errorf("%s ran (%d running marks, %d ends), want never\n%s", id, marks, ends, describe(h))
		case g.ran && (marks > 1 || ends != 1):
			t.Errorf("%s: %d running marks and %d ends of a run, want at most 1 and exactly 1\n%s", id, marks, ends, describe(h))
		}
		if n := countTransitions(h, task.Running, task.Running); n != 0 {
			t.Errorf("%s was taken over %d times, but no worker died\n%s", id, n, describe(h))
		}
	}

	// Unique keys: duplicates of the first, never ready.
	for _, id := range []string{"uniq-2", "uniq-3"} {
		got, h := final[id], history(t, cl, id)
		if got.DuplicateOf != "uniq-1" || got.State != task.Cancelled {
			t.Errorf("%s: %s, duplicate_of %q (%s), want cancelled as a duplicate of uniq-1", id, got.State, got.DuplicateOf, got.Reason)
		}
		for _, r := range h {
			if r.Event.To != task.Cancelled {
				t.Errorf("%s went to %s, want only its creation as cancelled\n%s", id, r.Event.To, describe(h))
			}
		}
	}
	if got := final["uniq-1"]; got.DuplicateOf != "" || got.UniqueKey != "customer-42" {
		t.Errorf("uniq-1: duplicate_of %q, unique_key %q; want the key's holder", got.DuplicateOf, got.UniqueKey)
	}

	// Trigger rules and results flowing down.
	checkGather(t, final["gather"], "gather", []demo.GatherInput{
		{ID: "src-a", State: "succeeded", Label: "src-a"}, {ID: "src-b", State: "succeeded", Label: "src-b"}})
	checkGather(t, final["cleanup"], "cleanup", []demo.GatherInput{{ID: "broken", State: "failed"}})
	checkGather(t, final["final"], "final", []demo.GatherInput{
		{ID: "gather", State: "succeeded", Label: "gather"}, {ID: "after-broken", State: "cancelled"},
		{ID: "cleanup", State: "succeeded", Label: "cleanup"}})
	checkGather(t, final["gated-1"], "gated-1", []demo.GatherInput{
		{ID: "gate", State: "succeeded", Label: "gate"}, {ID: "src-b", State: "succeeded", Label: "src-b"}})
	checkGather(t, final["gated-2"], "gated-2", []demo.GatherInput{{ID: "gated-1", State: "succeeded", Label: "gated-1"}})
	if got := final["never-cleanup"]; !strings.Contains(got.Reason, "no upstream failed") {
		t.Errorf("never-cleanup: reason %q, want the any_failed rule's", got.Reason)
	}

	// Re-drive with dependents: gate's series started again once, its
	// cancelled dependents were re-opened once each and say by whom; its
	// cleanup was left alone.
	if got := final["gate"]; got.Redrives != 1 || got.Attempt != 1 {
		t.Errorf("gate: %d re-drives, attempt %d; want 1 and 1", got.Redrives, got.Attempt)
	}
	for _, id := range []string{"gated-1", "gated-2"} {
		h := history(t, cl, id)
		if n := countTransitions(h, task.Cancelled, task.Waiting); n != 1 {
			t.Errorf("%s re-opened %d times, want 1\n%s", id, n, describe(h))
		}
		if !hasReason(h, task.Cancelled, task.Waiting, "re-opened by the re-drive of gate with its dependents (by e2e-operator)") {
			t.Errorf("%s: no re-open naming gate's re-drive and its operator\n%s", id, describe(h))
		}
		if got := final[id]; got.CancelledBy != "" {
			t.Errorf("%s succeeded with cancelled_by %q, want it cleared on re-open", id, got.CancelledBy)
		}
	}
	if h := history(t, cl, "gate-cleanup"); countTransitions(h, task.Cancelled, task.Waiting) != 0 {
		t.Errorf("gate-cleanup was re-opened\n%s", describe(h))
	}

	// ax status -o json shows the rule, the key and the inputs.
	st := axStatusJSON(t, c, "gated-1")
	var gateResult struct {
		Label string `json:"label"`
	}
	if len(st.Inputs) != 2 || st.Inputs[0].ID != "gate" || st.Inputs[0].State != task.Succeeded ||
		json.Unmarshal(st.Inputs[0].Result, &gateResult) != nil || gateResult.Label != "gate" {
		t.Errorf("ax status gated-1 inputs %+v, want gate succeeded with its result first", st.Inputs)
	}
	if st := axStatusJSON(t, c, "cleanup"); st.Task.TriggerRule != task.TriggerAnyFailed ||
		len(st.Inputs) != 1 || st.Inputs[0].State != task.Failed {
		t.Errorf("ax status cleanup: trigger_rule %q, inputs %+v; want any_failed with broken failed", st.Task.TriggerRule, st.Inputs)
	}
	if st := axStatusJSON(t, c, "uniq-2"); st.Task.DuplicateOf != "uniq-1" || st.Task.UniqueKey != "customer-42" {
		t.Errorf("ax status uniq-2: duplicate_of %q, unique_key %q", st.Task.DuplicateOf, st.Task.UniqueKey)
	}

	// The audit mirror tells the same story, once it has every event (a
	// batch a killed orchestrator's mirror held comes back after its ack
	// wait, possibly after later events).
	for _, g := range graph {
		id := g.spec.ID
		h := history(t, cl, id)
		last := h[len(h)-1].Revision
		eventually(t, dagTimeout, fmt.Sprintf("the mirror to have the %d events of %s", len(h), id), func() (bool, string) {
			var events int
			var seq uint64
			err := db.QueryRow("SELECT (SELECT COUNT(*) FROM ax_events WHERE task_id = ?), last_seq FROM ax_tasks WHERE id = ?", id, id).Scan(&events, &seq)
			return err == nil && events == len(h) && seq == last, fmt.Sprintf("%d events, last_seq %d (want %d), %v", events, seq, last, err)
		})
	}
	for _, g := range graph {
		id := g.spec.ID
		var rule, key, dup, by sql.NullString
		var attempts int
		if err := db.QueryRow(`SELECT trigger_rule, unique_key, duplicate_of, cancelled_by,
			(SELECT COUNT(*) FROM ax_attempts a WHERE a.task_id = t.id) FROM ax_tasks t WHERE id = ?`, id).
			Scan(&rule, &key, &dup, &by, &attempts); err != nil {
			t.Fatalf("mirrored %s: %v", id, err)
		}
		str := func(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
		wantRule := sql.NullString{}
		if len(g.spec.DependsOn) > 0 {
			wantRule = str(string(g.spec.Trigger()))
		}
		f := final[id]
		wantAttempts := 0
		if g.ran {
			wantAttempts = 1
		}
		if rule != wantRule || key != str(g.spec.UniqueKey) || dup != str(f.DuplicateOf) || by != str(f.CancelledBy) || attempts != wantAttempts {
			t.Errorf("mirrored %s: trigger_rule %v, unique_key %v, duplicate_of %v, cancelled_by %v, %d attempts; want %v, %q, %q, %q, %d",
				id, rule, key, dup, by, attempts, wantRule, g.spec.UniqueKey, f.DuplicateOf, f.CancelledBy, wantAttempts)
		}
	}
	for _, id := range []string{"gated-1", "gated-2"} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM ax_events WHERE task_id = ? AND from_state = 'cancelled' AND to_state = 'waiting'
			AND reason LIKE '%re-opened by the re-drive of gate with its dependents (by e2e-operator)%'`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("mirrored re-opens of %s: %d, %v", id, n, err)
		}
	}
}

// waitFor polls a task until cond holds (within dagTimeout).
func waitFor(t *testing.T, cl *sdk.Client, id, what string, cond func(*task.Task) bool) {
	t.Helper()
	eventually(t, dagTimeout, id+" "+what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := cl.Get(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return cond(got), fmt.Sprintf("%s (%s)", got.State, got.Reason)
	})
}

// get reads a task's record.
func get(t *testing.T, cl *sdk.Client, id string) *task.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got
}

// hasReason reports whether h has a from -> to transition whose reason
// contains want.
func hasReason(h []store.Revisioned, from, to task.State, want string) bool {
	return slices.ContainsFunc(h, func(r store.Revisioned) bool {
		return r.Event.From == from && r.Event.To == to && strings.Contains(r.Event.Reason, want)
	})
}

// checkGather checks a succeeded demo.gather task's result.
func checkGather(t *testing.T, got *task.Task, label string, want []demo.GatherInput) {
	t.Helper()
	var r demo.GatherResult
	if err := json.Unmarshal(got.Result, &r); err != nil {
		t.Errorf("%s: result %s: %v", got.ID, got.Result, err)
		return
	}
	if r.Label != label || !slices.Equal(r.Inputs, want) {
		t.Errorf("%s: result %+v, want label %q and inputs %+v", got.ID, r, label, want)
	}
}

// statusJSON is the part of `ax status -o json ID` the tests read.
type statusJSON struct {
	Task   task.Task    `json:"task"`
	Inputs []task.Input `json:"inputs"`
}

// axStatusJSON runs `ax status -o json id`.
func axStatusJSON(t *testing.T, c *cluster, id string) statusJSON {
	t.Helper()
	out, err := exec.Command(axBin, "status", id, "-o", "json", "--nats", c.url).Output()
	if err != nil {
		t.Fatalf("ax status %s: %v\n%s", id, err, out)
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("ax status %s -o json: %v\n%s", id, err, out)
	}
	return st
}
