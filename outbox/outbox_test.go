package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/task"
)

// TestCommitAndRollback: rows written in a committed transaction become
// tasks (a spec and a graph); a rolled-back transaction writes nothing, so
// nothing of it is ever submitted.
func TestCommitAndRollback(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	a := startAX(t)
	relay := startRelay(t, db, a.url, outbox.Config{})
	ctx := testenv.Context(t, time.Minute)

	// A business table written in the same transactions.
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	committed := func(order string, rollback bool) (string, []string) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (?)", order); err != nil {
			t.Fatal(err)
		}
		mail, _ := task.New(demo.TypeNoop, map[string]string{"order": order})
		mail.ID = order + "-mail"
		id, err := outbox.Enqueue(ctx, tx, mail)
		if err != nil {
			t.Fatal(err)
		}
		a1, _ := task.New(demo.TypeNoop, nil)
		a2, _ := task.New(demo.TypeNoop, nil)
		a1.ID, a2.ID = order+"-pack", order+"-ship"
		a2.DependsOn = []string{a1.ID}
		gids, err := outbox.EnqueueGraph(ctx, tx, []task.Spec{a1, a2})
		if err != nil {
			t.Fatal(err)
		}
		if rollback {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
		} else if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return id, gids
	}
	rolledID, rolledGraph := committed("order-1", true)
	id, graph := committed("order-2", false)
	if err := outbox.Notify(a.client.Conn()); err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{id}, graph...) {
		got, err := a.client.Wait(ctx, want)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("task %s: %+v %v", want, got, err)
		}
	}
	// Everything committed was relayed; the rolled-back rows never existed.
	testenv.Eventually(t, 30*time.Second, "no pending rows", func() bool { return pendingRows(ctx, db) == 0 })
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Fatalf("ax_outbox has %d rows, want 2 (a spec and a graph)", rows)
	}
	for _, gone := range append([]string{rolledID}, rolledGraph...) {
		if _, err := a.client.Get(ctx, gone); !isNotFound(err) {
			t.Fatalf("task %s of a rolled-back transaction: %v, want not found", gone, err)
		}
	}
	if s := relay.Stats(); s.Rows != 2 || s.Tasks != 3 {
		t.Fatalf("relay stats %+v, want 2 rows and 3 tasks", s)
	}
	checkOneCreation(t, a.client, append([]string{id}, graph...))
}

// TestEnqueueValidates: an invalid spec is refused at Enqueue and writes
// nothing; ids are filled in (and fixed) at Enqueue.
func TestEnqueueValidates(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	ctx := testenv.Context(t, time.Minute)
	bad, _ := task.New("bad type!", nil)
	if _, err := outbox.Enqueue(ctx, db, bad); err == nil || !strings.Contains(err.Error(), "type") {
		t.Fatalf("Enqueue of an invalid type: %v", err)
	}
	cyc1, _ := task.New(demo.TypeNoop, nil)
	cyc2, _ := task.New(demo.TypeNoop, nil)
	cyc1.ID, cyc2.ID = "c1", "c2"
	cyc1.DependsOn, cyc2.DependsOn = []string{"c2"}, []string{"c1"}
	if _, err := outbox.EnqueueGraph(ctx, db, []task.Spec{cyc1, cyc2}); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("EnqueueGraph of a cycle: %v", err)
	}
	if _, err := outbox.EnqueueMany(ctx, db, nil); !errors.Is(err, outbox.ErrEmpty) {
		t.Fatalf("EnqueueMany(nil): %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("ax_outbox has %d rows (%v), want 0", n, err)
	}
	ok, _ := task.New(demo.TypeNoop, nil)
	id, err := outbox.Enqueue(ctx, db, ok)
	if err != nil || !task.ValidID(id) {
		t.Fatalf("Enqueue without id: %q %v", id, err)
	}
	var stored string
	if err := db.QueryRowContext(ctx, "SELECT task_id FROM ax_outbox").Scan(&stored); err != nil || stored != id {
		t.Fatalf("stored task id %q (%v), want %q", stored, err, id)
	}
}

// TestMigrate: migrating twice is a no-op; Schema returns the DDL.
func TestMigrate(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	ctx := testenv.Context(t, time.Minute)
	v, err := outbox.Migrate(ctx, db)
	if err != nil || v != outbox.SchemaVersion() || v < 1 {
		t.Fatalf("Migrate again: %d %v", v, err)
	}
	if !strings.Contains(outbox.Schema(), "CREATE TABLE IF NOT EXISTS ax_outbox") {
		t.Fatalf("Schema() = %q", outbox.Schema())
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO ax_outbox_schema_version VALUES (99, 'future', NOW())"); err != nil {
		t.Fatal(err)
	}
	var tooNew *outbox.SchemaTooNewError
	if _, err := outbox.Migrate(ctx, db); !errors.As(err, &tooNew) {
		t.Fatalf("Migrate of a newer schema: %v", err)
	}
}

// TestRelayWithoutTable: Start explains a missing table.
func TestRelayWithoutTable(t *testing.T) {
	t.Parallel()
	_, db := mirrortestDB(t)
	srv := testenv.NATS(t)
	r, err := outbox.NewRelay(db, testenv.Conn(t, srv.URL()), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Start(testenv.Context(t, 30*time.Second))
	if err == nil || !strings.Contains(err.Error(), "outbox.Migrate") {
		t.Fatalf("Start without table: %v", err)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRetention: sent rows are deleted after the retention period, in
// bounded batches; pending rows are kept.
func TestRetention(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	a := startAX(t)
	ctx := testenv.Context(t, time.Minute)
	specs := noops(25, "ret")
	enqueueCommitted(t, db, specs)
	relay := startRelay(t, db, a.url, outbox.Config{Retention: time.Millisecond, RetentionInterval: 20 * time.Millisecond, DeleteBatch: 10})
	waitTasks(t, a.client, "ret", len(specs), time.Minute)
	testenv.Eventually(t, time.Minute, "sent rows deleted", func() bool {
		var n int
		return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_outbox").Scan(&n) == nil && n == 0 &&
			relay.Stats().Deleted >= uint64(len(specs))
	})
	if s := relay.Stats(); s.Deleted != uint64(len(specs)) {
		t.Fatalf("relay deleted %d rows, want %d", s.Deleted, len(specs))
	}
}
