package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestRelayKill9BetweenPublishAndMark: an `ax relay` process publishes a
// batch of outbox rows and is killed with kill -9 before its transaction
// marks them sent (a trigger makes the marking UPDATE hang, so the moment is
// exact). The rows are still pending; a new relay publishes them again, and
// each row is still exactly one task with one creation event.
func TestRelayKill9BetweenPublishAndMark(t *testing.T) {
	dsn, db := mirrortest.DB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := outbox.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	c.startServer()
	c.startOrchestrator("orc-1")
	nc, err := nats.Connect(c.url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var cl *sdk.Client
	eventually(t, time.Minute, "the orchestrator creating AX's streams", func() (bool, string) {
		cl, err = sdk.New(ctx, nc) // fails until the streams exist
		return err == nil, fmt.Sprint(err)
	})

	const n = 300
	specs := make([]task.Spec, n)
	for i := range specs {
		s, _ := task.New("demo.noop", nil)
		s.ID = fmt.Sprintf("ob-%04d", i)
		specs[i] = s
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.EnqueueMany(ctx, tx, specs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Marking rows sent hangs from now on.
	if _, err := db.ExecContext(ctx, "CREATE TRIGGER ax_outbox_hang BEFORE UPDATE ON ax_outbox FOR EACH ROW SET @ax_hang = SLEEP(600)"); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, end hung statements before the database is dropped.
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP TRIGGER IF EXISTS ax_outbox_hang")
		rows, err := db.QueryContext(context.Background(), "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND INFO LIKE '%SLEEP(600)%' AND ID <> CONNECTION_ID()")
		if err != nil {
			return
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if rows.Scan(&id) == nil {
				ids = append(ids, id)
			}
		}
		rows.Close()
		for _, id := range ids {
			_, _ = db.ExecContext(context.Background(), fmt.Sprintf("KILL %d", id))
		}
	})
	relay := c.newProc("relay", "relay", "--nats", c.url, "--mysql-dsn", dsn, "--log-level", logLevel(), "--batch", "500")
	relay.start()

	tasks := func() int {
		ids, err := cl.TaskIDs(ctx, "ob-")
		if err != nil {
			return -1
		}
		return len(ids)
	}
	eventually(t, time.Minute, "the relay publishing every row", func() (bool, string) {
		k := tasks()
		return k == n, fmt.Sprintf("%d tasks", k)
	})
	var dbName string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	hung := func() []int64 {
		rows, err := db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND INFO LIKE '%SLEEP(600)%' AND ID <> CONNECTION_ID()", dbName)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	eventually(t, time.Minute, "the relay marking its batch", func() (bool, string) {
		ids := hung()
		return len(ids) > 0, fmt.Sprintf("%d hung updates", len(ids))
	})
	relay.kill9()
	// The dead relay's connection would sit in SLEEP holding its row locks
	// until MySQL noticed; end it as MySQL does for a vanished client.
	for _, id := range hung() {
		_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
	}
	if _, err := db.ExecContext(ctx, "DROP TRIGGER ax_outbox_hang"); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		var k int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_outbox WHERE sent_at IS NULL").Scan(&k); err != nil {
			return -1
		}
		return k
	}
	if k := pending(); k != n {
		t.Fatalf("%d rows pending after the relay died before marking, want %d", k, n)
	}
	relay.start()
	eventually(t, time.Minute, "the new relay publishing and marking every row", func() (bool, string) {
		k := pending()
		return k == 0, fmt.Sprintf("%d pending", k)
	})
	if k := tasks(); k != n {
		t.Fatalf("%d tasks after the rows were published twice, want %d", k, n)
	}
	for _, s := range specs {
		h, err := cl.History(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		creations := 0
		for _, ev := range h {
			if ev.Event.Kind == task.KindTransition && ev.Event.From == "" {
				creations++
			}
		}
		if creations != 1 {
			t.Fatalf("task %s has %d creation events", s.ID, creations)
		}
	}
	relay.term()
}
