package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// newDB returns a fresh database with the outbox table, its DSN and a handle.
func newDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 30*time.Second)
	if _, err := outbox.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return dsn, db
}

// openDSN opens another handle on dsn (e.g. through a proxy).
func openDSN(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 2 * time.Second
	cfg.ReadTimeout, cfg.WriteTimeout = 10*time.Second, 10*time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// ax is a running AX: embedded NATS, an orchestrator, an executor with the
// demo handlers (demo.noop and friends) and a client.
type ax struct {
	url    string
	client *sdk.Client
}

func startAX(t *testing.T) ax {
	t.Helper()
	return startAXWith(t, orchestrator.Config{})
}

func startAXWith(t *testing.T, cfg orchestrator.Config) ax {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), cfg)
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 64})
	demo.Register(ex)
	testenv.Start(t, ex)
	return ax{url: srv.URL(), client: testenv.Client(t, srv.URL())}
}

// startRelay starts a relay on its own NATS connection; it is stopped when
// the test ends.
func startRelay(t *testing.T, db *sql.DB, url string, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(zerolog.NewSlogHandler(*testenv.Logger(t)))
	}
	r, err := outbox.NewRelay(db, testenv.Conn(t, url), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(testenv.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop relay: %v", err)
		}
	})
	return r
}

// noops returns n demo.noop specs with ids prefix-0000…
func noops(n int, prefix string) []task.Spec {
	out := make([]task.Spec, n)
	for i := range out {
		s, _ := task.New(demo.TypeNoop, nil)
		s.ID = fmt.Sprintf("%s-%05d", prefix, i)
		out[i] = s
	}
	return out
}

// enqueueCommitted writes specs in one committed transaction.
func enqueueCommitted(t *testing.T, db *sql.DB, specs []task.Spec) {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.EnqueueMany(ctx, tx, specs); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// pendingRows counts the rows not yet sent (-1 on error).
func pendingRows(ctx context.Context, db *sql.DB) int {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_outbox WHERE sent_at IS NULL").Scan(&n); err != nil {
		return -1
	}
	return n
}

// waitTasks waits until AX has a task for every id.
func waitTasks(t *testing.T, c *sdk.Client, prefix string, n int, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d+10*time.Second)
	var got int
	testenv.Eventually(t, d, fmt.Sprintf("%d tasks %s-*", n, prefix), func() bool {
		ids, err := c.TaskIDs(ctx, prefix+"-")
		got = len(ids)
		return err == nil && got >= n
	})
	ids, err := c.TaskIDs(ctx, prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d tasks %s-*, want %d", len(ids), prefix, n)
	}
}

// checkOneCreation verifies that each task's history starts with one
// creation event and has no second one: each row became exactly one task.
func checkOneCreation(t *testing.T, c *sdk.Client, ids []string) {
	t.Helper()
	ctx := testenv.Context(t, 3*time.Minute)
	for _, id := range ids {
		h, err := c.History(ctx, id)
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		creations := 0
		for _, ev := range h {
			if ev.Event.From == "" && ev.Event.Kind == task.KindTransition {
				creations++
			}
		}
		if creations != 1 {
			t.Fatalf("task %s has %d creation events", id, creations)
		}
	}
}

func isNotFound(err error) bool { return errors.Is(err, sdk.ErrNotFound) }

func idsOf(specs []task.Spec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.ID
	}
	return out
}

// mirrortestDB is a fresh database without the outbox table.
func mirrortestDB(t *testing.T) (string, *sql.DB) { return mirrortest.DB(t) }
