package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// syntheticTask writes one task's life (ready, running, an end state) at
// the given time through the same batch writer the mirror uses.
func syntheticTask(t *testing.T, ctx context.Context, db *sql.DB, seq *uint64, id string, start time.Time, end task.State) {
	t.Helper()
	snap := task.Task{Spec: task.Spec{ID: id, Type: "demo.noop", Capability: "default"}, Attempt: 1, ExecutionID: "x-" + id, SubmittedAt: start}
	var recs []record
	add := func(from, to task.State, at time.Time) {
		*seq++
		snap.State, snap.UpdatedAt = to, at
		switch to {
		case task.Ready:
			snap.ReadyAt = &at
		case task.Running:
			snap.StartedAt, snap.Executor = &at, "exec-1"
		default:
			snap.FinishedAt = &at
		}
		recs = append(recs, record{Seq: *seq, TaskID: id, Event: task.Event{Kind: task.KindTransition, From: from, To: to, At: at, Actor: "orch", Task: snap}})
	}
	add("", task.Ready, start)
	if end != task.Ready {
		add(task.Ready, task.Running, start.Add(time.Second))
		if end != task.Running {
			add(task.Running, end, start.Add(2*time.Second))
		}
	}
	if err := writeBatch(ctx, db, buildBatch(recs), nil); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, ctx context.Context, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRetention deletes rows older than the cut-off in bounded batches,
// keeps recent rows and tasks that have not ended, and runs periodically
// inside a mirror with an injected clock.
func TestRetention(t *testing.T) {
	t.Parallel()
	_, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	old := now.Add(-40 * 24 * time.Hour)
	var seq uint64
	for i := range 8 {
		syntheticTask(t, ctx, db, &seq, fmt.Sprintf("old-%d", i), old.Add(time.Duration(i)*time.Minute), task.Succeeded)
	}
	syntheticTask(t, ctx, db, &seq, "old-but-running", old, task.Running)
	for i := range 3 {
		syntheticTask(t, ctx, db, &seq, fmt.Sprintf("new-%d", i), now.Add(-time.Hour), task.Failed)
	}
	// 8×3 + 2 old events, 3×3 recent ones.
	res, err := Prune(ctx, db, now.Add(-30*24*time.Hour), 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 26 || res.Attempts != 8 || res.Tasks != 8 || res.Steps != 0 {
		t.Fatalf("pruned %+v", res)
	}
	// 26 events in batches of 5 → 6 statements; 8 attempts → 2; 8 tasks → 2;
	// no steps → 1.
	if res.Statements != 12 {
		t.Fatalf("%d DELETE statements, want 12 bounded ones", res.Statements)
	}
	if e, a, tk := count(t, ctx, db, "ax_events"), count(t, ctx, db, "ax_attempts"), count(t, ctx, db, "ax_tasks"); e != 9 || a != 4 || tk != 4 {
		t.Fatalf("left %d events, %d attempts, %d tasks; want 9, 4 (3 recent + the running one), 4", e, a, tk)
	}

	// The mirror's own retention loop, with a clock a year ahead.
	srv := testenv.NATS(t)
	log, _ := newLog(t)
	cfg := fastConfig(log)
	cfg.Now = func() time.Time { return now.Add(365 * 24 * time.Hour) }
	cfg.RetentionBatch = 2
	startMirror(t, srv.URL(), db, cfg, hooks{})
	testenv.Eventually(t, 10*time.Second, "retention to delete the remaining old rows", func() bool {
		return count(t, ctx, db, "ax_events") == 0 && count(t, ctx, db, "ax_tasks") == 1 && count(t, ctx, db, "ax_attempts") == 1
	})
}
