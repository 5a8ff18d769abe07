package mirror

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// TestMirrorWorkload runs a real workload with two mirrors sharing the
// consumer, then checks the tables against AX_TASKS, that a rebuild into an
// empty database gives the same tables, and that replaying everything again
// (a new consumer from sequence 1) changes nothing.
func TestMirrorWorkload(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, db := mirrortest.DB(t)
	log, _ := newLog(t)
	cfg := fastConfig(log)
	cfg.Batch = 25
	m1 := startMirror(t, s.url, db, cfg, hooks{})
	m2 := startMirror(t, s.url, db, cfg, hooks{})
	ctx := testenv.Context(t, 60*time.Second)

	w := runWorkload(t, ctx, s.client, 2)
	waitCaughtUp(t, s.js, db, 20*time.Second)
	recs := checkMirror(t, ctx, s.js, db)

	t.Run("semantics", func(t *testing.T) {
		for _, id := range w.flaky {
			got := attemptsOf(t, ctx, db, id)
			var failures int
			for _, a := range got {
				if strings.HasSuffix(a, ":failed") {
					failures++
				}
			}
			if len(got) < 2 || got[len(got)-1] != strconv.Itoa(len(got))+":succeeded" || failures != len(got)-1 {
				t.Fatalf("flaky %s attempts %v", id, got)
			}
		}
		var state, reason, lastErr string
		if got := attemptsOf(t, ctx, db, w.redriven); !slices.Equal(got, []string{"1:failed", "2:failed", "1:failed", "2:failed"}) {
			t.Fatalf("re-driven attempts %v", got)
		}
		// Durable steps and the sleep, and the attempt the sleep ended.
		if got := attemptsOf(t, ctx, db, w.steps); !slices.Equal(got, []string{"1:sleeping", "1:succeeded"}) {
			t.Fatalf("steps task attempts %v", got)
		}
		var stepRows []string
		srs, err := db.QueryContext(ctx, "SELECT name, kind, attempt, COALESCE(CAST(result AS CHAR), ''), sleep_until IS NOT NULL FROM ax_steps WHERE task_id = ? ORDER BY stored_at, name", w.steps)
		if err != nil {
			t.Fatal(err)
		}
		for srs.Next() {
			var name, kind, result string
			var attempt int
			var until bool
			if err := srs.Scan(&name, &kind, &attempt, &result, &until); err != nil {
				t.Fatal(err)
			}
			stepRows = append(stepRows, fmt.Sprintf("%s %s %d %s %v", name, kind, attempt, result, until))
		}
		srs.Close()
		if want := []string{"step-1 step 1 1 false", "ax:sleep:1 sleep 1  true", "step-2 step 1 4 false", "step-3 step 1 9 false"}; !slices.Equal(stepRows, want) {
			t.Fatalf("ax_steps of %s: %q, want %q", w.steps, stepRows, want)
		}
		if got := attemptsOf(t, ctx, db, w.cancelled); !slices.Equal(got, []string{"1:cancelled"}) {
			t.Fatalf("cancelled attempts %v", got)
		}
		if got := attemptsOf(t, ctx, db, w.expired); !slices.Equal(got, []string{"1:expired"}) {
			t.Fatalf("expired attempts %v", got)
		}
		if got := attemptsOf(t, ctx, db, w.neverStarted); len(got) != 0 {
			t.Fatalf("never-started attempts %v", got)
		}
		var dispatches int
		if err := db.QueryRowContext(ctx, "SELECT state, dispatches FROM ax_tasks WHERE id = ?", w.neverStarted).Scan(&state, &dispatches); err != nil ||
			state != "failed" || dispatches != 2 {
			t.Fatalf("never started: %s, %d dispatches, %v", state, dispatches, err)
		}
		if err := db.QueryRowContext(ctx, "SELECT state, reason FROM ax_tasks WHERE id = ?", w.cascade).Scan(&state, &reason); err != nil ||
			state != "cancelled" || !strings.Contains(reason, "upstream") {
			t.Fatalf("cascade: %s %q %v", state, reason, err)
		}
		// Why a task of a DAG ran or did not: its trigger rule, whose end
		// cancelled it, whose key it duplicated.
		var cancelledBy, rule, dupOf, key sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT trigger_rule, cancelled_by FROM ax_tasks WHERE id = ?", w.cascade).Scan(&rule, &cancelledBy); err != nil ||
			rule.String != "all_succeeded" || !cancelledBy.Valid || !strings.Contains(reason, cancelledBy.String) {
			t.Fatalf("cascade: trigger_rule %v, cancelled_by %v (reason %q), %v", rule, cancelledBy, reason, err)
		}
		if err := db.QueryRowContext(ctx, "SELECT state, trigger_rule, cancelled_by FROM ax_tasks WHERE id = ?", w.cleanup).Scan(&state, &rule, &cancelledBy); err != nil ||
			state != "succeeded" || rule.String != "any_failed" || cancelledBy.Valid {
			t.Fatalf("cleanup: %s, trigger_rule %v, cancelled_by %v, %v", state, rule, cancelledBy, err)
		}
		if err := db.QueryRowContext(ctx, "SELECT state, unique_key, duplicate_of FROM ax_tasks WHERE id = ?", w.duplicate).Scan(&state, &key, &dupOf); err != nil ||
			state != "cancelled" || key.String != "customer-42 ⌘" || dupOf.String != w.holder {
			t.Fatalf("duplicate: %s, unique_key %v, duplicate_of %v (holder %s), %v", state, key, dupOf, w.holder, err)
		}
		var dups int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_tasks WHERE type = ? AND unique_key = ? AND duplicate_of = ?",
			demo.TypeNoop, "customer-42 ⌘", w.holder).Scan(&dups); err != nil || dups != 1 {
			t.Fatalf("duplicates of %s by key: %d, %v", w.holder, dups, err)
		}
		if got := attemptsOf(t, ctx, db, w.duplicate); len(got) != 0 {
			t.Fatalf("duplicate attempts %v", got)
		}
		if err := db.QueryRowContext(ctx, "SELECT state, last_error FROM ax_tasks WHERE id = ?", w.redriven).Scan(&state, &lastErr); err != nil ||
			state != "failed" || !strings.Contains(lastErr, "simulated downstream outage") {
			t.Fatalf("dead letter: %s %q %v", state, lastErr, err)
		}
		// The sharded job: each shard names it as parent, with its index.
		srows, err := db.QueryContext(ctx, "SELECT id, shard_id, state FROM ax_tasks WHERE parent_id = ? ORDER BY CAST(shard_id AS UNSIGNED)", w.sharded)
		if err != nil {
			t.Fatal(err)
		}
		var shards []string
		for srows.Next() {
			var id, n, st string
			if err := srows.Scan(&id, &n, &st); err != nil {
				t.Fatal(err)
			}
			if id != task.ShardID(w.sharded, len(shards)) || n != strconv.Itoa(len(shards)) {
				t.Fatalf("shard row %s has shard_id %s, want %d", id, n, len(shards))
			}
			shards = append(shards, st)
		}
		srows.Close()
		if len(shards) != workloadShards || slices.ContainsFunc(shards, func(st string) bool { return st != "succeeded" }) {
			t.Fatalf("shards of %s: %v", w.sharded, shards)
		}
		var registered int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events WHERE task_id = ? AND kind = ?", w.sharded, task.KindShardsRegistered).
			Scan(&registered); err != nil || registered != 1 {
			t.Fatalf("shards_registered events of %s: %d, %v", w.sharded, registered, err)
		}
		// Every event is written by the orchestrator: executors write no records.
		var executorActors int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events WHERE actor LIKE 'executor-%'").Scan(&executorActors); err != nil || executorActors != 0 {
			t.Fatalf("events written by executors: %d %v", executorActors, err)
		}
		// Every task's events are in sequence order with no gap in its chain.
		perTask := map[string][]record{}
		for _, r := range recs {
			perTask[r.TaskID] = append(perTask[r.TaskID], r)
		}
		for id, evs := range perTask {
			rows, err := db.QueryContext(ctx, "SELECT seq, COALESCE(from_state,''), to_state FROM ax_events WHERE task_id = ? ORDER BY seq", id)
			if err != nil {
				t.Fatal(err)
			}
			var prevTo string
			i := 0
			for rows.Next() {
				var seq uint64
				var from, to string
				if err := rows.Scan(&seq, &from, &to); err != nil {
					t.Fatal(err)
				}
				if seq != evs[i].Seq || (i > 0 && from != prevTo) || (i == 0 && from != "") {
					t.Fatalf("task %s event %d: seq %d %s->%s after %s", id, i, seq, from, to, prevTo)
				}
				prevTo = to
				i++
			}
			rows.Close()
			if i != len(evs) {
				t.Fatalf("task %s: %d events mirrored, %d in AX_TASKS", id, i, len(evs))
			}
		}
	})

	t.Run("lag", func(t *testing.T) {
		for _, m := range []*Mirror{m1, m2} {
			l, err := m.Lag(ctx)
			if err != nil || l.Behind() || l.Age != 0 || !l.DBDownSince.IsZero() {
				t.Fatalf("lag %+v, %v", l, err)
			}
		}
		l1, _ := m1.Lag(ctx)
		l2, _ := m2.Lag(ctx)
		if l1.Written+l2.Written < uint64(len(recs)) {
			t.Fatalf("written %d + %d < %d events", l1.Written, l2.Written, len(recs))
		}
	})

	live := dump(t, ctx, db)

	t.Run("rebuild equals live", func(t *testing.T) {
		_, db2 := mirrortest.DB(t)
		res, err := Rebuild(ctx, testenv.Conn(t, s.url), db2, RebuildOptions{Batch: 40, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if res.Events != uint64(len(recs)) || res.LastSeq != recs[len(recs)-1].Seq {
			t.Fatalf("rebuild %+v, want %d events", res, len(recs))
		}
		if rebuilt := dump(t, ctx, db2); rebuilt != live {
			t.Fatalf("rebuilt database differs from the live mirror: %s", firstDiff(live, rebuilt))
		}
		// A second rebuild into the now non-empty database is refused.
		if _, err := Rebuild(ctx, testenv.Conn(t, s.url), db2, RebuildOptions{}); !errors.Is(err, ErrNotEmpty) {
			t.Fatalf("rebuild into a non-empty database: %v", err)
		}
	})

	t.Run("full replay changes nothing", func(t *testing.T) {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m1.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		if err := m2.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		if err := s.js.DeleteConsumer(ctx, subject.StreamTasks, subject.ConsumerMirror); err != nil {
			t.Fatal(err)
		}
		cfg := fastConfig(log)
		cfg.Batch = 7 // different batch boundaries than the first pass
		startMirror(t, s.url, db, cfg, hooks{})
		startMirror(t, s.url, db, cfg, hooks{})
		waitCaughtUp(t, s.js, db, 20*time.Second)
		if again := dump(t, ctx, db); again != live {
			t.Fatalf("replay changed the mirror: %s", firstDiff(live, again))
		}
	})
}

// TestMirrorSurvivesMySQLOutage cuts the connection between the mirror and
// MySQL while tasks run: tasks still finish, the lag is reported, and once
// MySQL is back the mirror catches up with no gap and no duplicate.
func TestMirrorSurvivesMySQLOutage(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	dsn, db := mirrortest.DB(t)
	p := newProxy(t, dsnAddr(t, dsn))
	log, logs := newLog(t)
	cfg := fastConfig(log)
	cfg.LagWarnEvents = 1
	m, err := NewFromDSN(testenv.Conn(t, s.url), mirrortest.WithAddr(t, dsn, p.Addr()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 60*time.Second)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })

	// Some traffic before the cut.
	var before []string
	for range 5 {
		id, err := s.client.Submit(ctx, task.Spec{Type: "demo.noop", Priority: new(2)})
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, id)
	}
	for _, id := range before {
		if _, err := s.client.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, s.js, db, 10*time.Second)

	// Cut MySQL off in the middle of a workload: sleepers are running and
	// the mirror is writing their events.
	var sleepers []string
	for range 8 {
		id, err := s.client.Submit(ctx, task.Spec{Type: "demo.sleep", Payload: json.RawMessage(`{"sleep":"300ms"}`), Priority: new(2)})
		if err != nil {
			t.Fatal(err)
		}
		sleepers = append(sleepers, id)
	}
	testenv.Eventually(t, 30*time.Second, "the sleepers' dispatches to be mirrored", func() bool {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events WHERE to_state = 'ready'").Scan(&n)
		return err == nil && n >= len(before)+1
	})
	p.Cut()
	// Tasks run and finish while the mirror cannot write.
	runWorkload(t, ctx, s.client, 1)
	for _, id := range sleepers {
		if _, err := s.client.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the outage and the lag to be reported", func() bool {
		l, err := m.Lag(ctx)
		return err == nil && l.Behind() && !l.DBDownSince.IsZero() && l.LastError != "" && l.Age > 0
	})
	var mirrored int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events").Scan(&mirrored); err != nil {
		t.Fatal(err)
	}
	st, _ := s.js.Stream(ctx, subject.StreamTasks)
	info, _ := st.Info(ctx)
	if uint64(mirrored) >= info.State.Msgs {
		t.Fatalf("nothing is missing during the outage: %d rows, %d messages", mirrored, info.State.Msgs)
	}
	testenv.Eventually(t, 10*time.Second, "the lag warning", func() bool {
		out := logs.String()
		return strings.Contains(out, "writing to MySQL failed") && strings.Contains(out, "mirror lag growing")
	})

	p.Restore()
	waitCaughtUp(t, s.js, db, 30*time.Second)
	checkMirror(t, ctx, s.js, db)
	testenv.Eventually(t, 5*time.Second, "the recovery to be logged and the outage cleared", func() bool {
		l, err := m.Lag(ctx)
		return err == nil && l.DBDownSince.IsZero() && strings.Contains(logs.String(), "MySQL reachable again")
	})
}

var errCrash = errors.New("simulated crash")

// TestMirrorCrashMidBatch kills mirrors in the middle of a batch (inside the
// transaction, and after the commit but before the ack); a new instance
// catches up with no gap and no duplicate.
func TestMirrorCrashMidBatch(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	_, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 60*time.Second)
	runWorkload(t, ctx, s.client, 1)

	log, _ := newLog(t)
	cfg := fastConfig(log)
	cfg.Batch = 10
	cfg.AckWait = time.Second

	crashOn := func(n int) func() error {
		calls := 0
		return func() error {
			if calls++; calls == n {
				return errCrash
			}
			return nil
		}
	}
	mid := crashOn(2)
	m1 := startMirror(t, s.url, db, cfg, hooks{midBatch: mid})
	waitDone(t, m1)
	committed := crashOn(3)
	m2 := startMirror(t, s.url, db, cfg, hooks{afterCommit: func(int) error { return committed() }})
	waitDone(t, m2)

	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	// m1 committed one batch, m2 three (the last one never acknowledged).
	if rows == 0 || rows > 4*cfg.Batch {
		t.Fatalf("after the crashes ax_events has %d rows, want 1..%d", rows, 4*cfg.Batch)
	}
	startMirror(t, s.url, db, cfg, hooks{})
	waitCaughtUp(t, s.js, db, 20*time.Second)
	checkMirror(t, ctx, s.js, db)
}

// waitDone waits until a mirror's loop has exited by itself (a crash hook).
func waitDone(t *testing.T, m *Mirror) {
	t.Helper()
	m.life.Lock()
	done := m.done
	m.life.Unlock()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the mirror did not crash")
	}
}
