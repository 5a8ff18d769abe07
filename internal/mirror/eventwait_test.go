package mirror

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestMirrorEventWaits: against MariaDB, ax_event_waits holds one row per
// event task with its wait (subject, match, timeout, since, timeout at)
// and how it ended: the event's sequence and data, an approval or a
// rejection (who, why), its timeout, a cancel; a task still held by its
// upstream is pending, one registered is waiting. Written again from the
// first event (a replay), the rows do not change.
func TestMirrorEventWaits(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, db := mirrortest.DB(t)
	log, _ := newLog(t)
	startMirror(t, s.url, db, fastConfig(log), hooks{})
	ctx := testenv.Context(t, time.Minute)
	c := s.client
	c.Caller = "alice"

	wait := func(id string, timeout time.Duration, deps ...string) task.Spec {
		return task.Spec{ID: id, Type: "order.wait", DependsOn: deps,
			WaitFor: &task.EventWait{Subject: "order.paid", Match: id, Timeout: task.Duration(timeout)}}
	}
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		wait("ew-event", time.Hour), wait("ew-ok", time.Hour), wait("ew-no", time.Hour), wait("ew-wait", time.Hour),
		wait("ew-cancel", time.Hour), wait("ew-expire", time.Second),
		{ID: "ew-gate", Type: demo.TypeNoop, Delay: task.Duration(time.Hour)}, wait("ew-pending", time.Hour, "ew-gate"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ew-event", "ew-ok", "ew-no", "ew-wait", "ew-cancel"} {
		testenv.Eventually(t, 30*time.Second, id+" waiting", func() bool {
			got, err := c.Get(ctx, id)
			return err == nil && got.EventWaitSince != nil
		})
	}
	seq, err := c.Signal(ctx, "order.paid.ew-event", map[string]int{"amount": 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(ctx, "ew-ok", sdk.ApproveOptions{Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Approve(ctx, "ew-no", sdk.ApproveOptions{Reject: true, Reason: "fraud", By: "console:bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "ew-cancel", "not needed"); err != nil {
		t.Fatal(err)
	}
	for id, st := range map[string]task.State{"ew-event": task.Succeeded, "ew-expire": task.Expired} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != st {
			t.Fatalf("%s: %+v, %v", id, got, err)
		}
	}
	waitCaughtUp(t, s.js, db, 20*time.Second)

	type row struct {
		subject, match, outcome string
		timeoutMS               int64
		since, timeoutAt, ended bool
		seq                     sql.NullInt64
		data, by, reason        sql.NullString
	}
	read := func() map[string]row {
		rows, err := db.QueryContext(ctx, `SELECT task_id, subject, match_token, outcome, timeout_ms, waiting_since IS NOT NULL,
			timeout_at IS NOT NULL, ended_at IS NOT NULL, event_seq, CAST(event_data AS CHAR), decided_by, decision_reason FROM ax_event_waits`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]row{}
		for rows.Next() {
			var id string
			var r row
			if err := rows.Scan(&id, &r.subject, &r.match, &r.outcome, &r.timeoutMS, &r.since, &r.timeoutAt, &r.ended, &r.seq, &r.data, &r.by, &r.reason); err != nil {
				t.Fatal(err)
			}
			out[id] = r
		}
		return out
	}
	got := read()
	if len(got) != 7 {
		t.Fatalf("ax_event_waits has %d rows, want 7 (no row for the plain task): %+v", len(got), got)
	}
	for id, want := range map[string]string{"ew-event": WaitEvent, "ew-ok": WaitApproved, "ew-no": WaitRejected, "ew-wait": WaitWaiting,
		"ew-cancel": WaitCancelled, "ew-expire": WaitExpired, "ew-pending": WaitPending} {
		r := got[id]
		if r.outcome != want || r.subject != "order.paid" || r.match != id {
			t.Errorf("%s: %+v; want outcome %s", id, r, want)
		}
		if ended := want != WaitWaiting && want != WaitPending; r.ended != ended || r.since != (want != WaitPending) {
			t.Errorf("%s: %+v; want ended %v", id, r, ended)
		}
	}
	var data map[string]int
	if e := got["ew-event"]; e.seq.Int64 != int64(seq) || json.Unmarshal([]byte(e.data.String), &data) != nil || data["amount"] != 7 || e.by.Valid {
		t.Errorf("the event's row: %+v (sequence %d)", e, seq)
	}
	if a := got["ew-ok"]; a.by.String != "alice" || a.reason.String != "fine" || a.seq.Valid || a.data.Valid {
		t.Errorf("the approval's row: %+v", a)
	}
	if r := got["ew-no"]; r.by.String != "alice for console:bob" || r.reason.String != "fraud" {
		t.Errorf("the rejection's row: %+v", r)
	}
	if w := got["ew-wait"]; w.timeoutMS != time.Hour.Milliseconds() || !w.timeoutAt {
		t.Errorf("the waiting row: %+v", w)
	}

	// Replayed from the first event, and the creations alone (older
	// than every row) written again: every row stays as it is.
	recs := streamEvents(t, ctx, s.js)
	var created []record
	for _, r := range recs {
		if r.Event.From == "" {
			created = append(created, r)
		}
	}
	for _, b := range [][]record{recs, created} {
		if err := writeBatch(ctx, db, buildBatch(b), nil); err != nil {
			t.Fatal(err)
		}
	}
	if again := read(); len(again) != len(got) {
		t.Fatalf("after a replay: %d rows", len(again))
	} else {
		for id, r := range got {
			if again[id] != r {
				t.Errorf("%s changed on replay: %+v → %+v", id, r, again[id])
			}
		}
	}
}
