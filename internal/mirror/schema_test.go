package mirror

import (
	"database/sql"
	"io/fs"
	"path"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// TestMigrateFromVersion2 upgrades a database written at schema version 2
// (rows included) to the DAG columns of version 3: existing rows keep
// their values with the new columns NULL; a migration interrupted after
// its ALTER and before its version row runs again without error.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	_, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 60*time.Second)

	// Version 2, as an older ax binary left it.
	old := fstest.MapFS{}
	for _, name := range []string{"0001_initial.sql", "0002_edges.sql"} {
		data, err := fs.ReadFile(migrationFiles, path.Join("migrations", name))
		if err != nil {
			t.Fatal(err)
		}
		old[path.Join("migrations", name)] = &fstest.MapFile{Data: data}
	}
	v2 := *schema
	v2.FS = old
	if v, err := v2.Migrate(ctx, db); err != nil || v != 2 {
		t.Fatalf("migrate to version 2: %d, %v", v, err)
	}
	now := time.Now().UTC()
	if _, err := db.ExecContext(ctx, `INSERT INTO ax_tasks (id, type, state, priority, capability, attempt, max_retries, redrives,
		submitted_at, dispatches, updated_at, state_since, depends_on, dependents, last_seq)
		VALUES ('OLD', 'demo.noop', 'cancelled', 2, 'default', 0, 5, 0, ?, 0, ?, ?, '["UP"]', '[]', 7)`, now, now, now); err != nil {
		t.Fatal(err)
	}

	check := func(what string) {
		t.Helper()
		if v, err := Migrate(ctx, db); err != nil || v != SchemaVersion() || v != 5 {
			t.Fatalf("%s: migrate to version 5: %d, %v", what, v, err)
		}
		if err := CheckSchema(ctx, db); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var state string
		var rule, key, dup, by sql.NullString
		if err := db.QueryRowContext(ctx, "SELECT state, trigger_rule, unique_key, duplicate_of, cancelled_by FROM ax_tasks WHERE id = 'OLD'").
			Scan(&state, &rule, &key, &dup, &by); err != nil || state != "cancelled" || rule.Valid || key.Valid || dup.Valid || by.Valid {
			t.Fatalf("%s: old row: %s %v %v %v %v, %v", what, state, rule, key, dup, by, err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = 'ax_tasks' AND index_name = 'ax_tasks_unique_key'`).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%s: ax_tasks_unique_key has %d columns, %v", what, n, err)
		}
	}
	check("upgrade")

	// Interrupted before its version row: the ALTER happened, the row not.
	if _, err := db.ExecContext(ctx, "DELETE FROM ax_schema_version WHERE version = 3"); err != nil {
		t.Fatal(err)
	}
	check("re-run")

	// The mirror writes the new columns of the old row's next event.
	snap := snapshot(task.Cancelled, func(t *task.Task) {
		t.ID, t.Type, t.DependsOn, t.CancelledBy = "OLD", "demo.noop", []string{"UP"}, "UP"
		t.UniqueKey, t.UniqueWindow = "k", task.Duration(time.Hour)
	})
	ev := task.Event{Kind: task.KindTransition, From: task.Waiting, To: task.Cancelled, At: now, Task: snap}
	if err := writeBatch(ctx, db, buildBatch([]record{{Seq: 8, TaskID: "OLD", Event: ev}}), nil); err != nil {
		t.Fatal(err)
	}
	var rule, key, by string
	if err := db.QueryRowContext(ctx, "SELECT trigger_rule, unique_key, cancelled_by FROM ax_tasks WHERE id = 'OLD'").Scan(&rule, &key, &by); err != nil ||
		rule != "all_succeeded" || key != "k" || by != "UP" {
		t.Fatalf("written row: %q %q %q, %v", rule, key, by, err)
	}
}
