package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// exampleEnv runs an embedded AX (server, orchestrator, an executor with an
// "email.send" handler) and opens a fresh MySQL database, the way a demo
// would; stop tears both down.
func exampleEnv() (url string, db *sql.DB, stop func()) {
	dir, _ := os.MkdirTemp("", "ax-outbox-example-")
	srv, err := natsserver.Start(natsserver.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	onc, _ := nats.Connect(srv.URL())
	orch, _ := orchestrator.New(onc, orchestrator.Config{})
	_ = orch.Start(context.Background())
	enc, _ := nats.Connect(srv.URL())
	ex, _ := executor.New(enc, executor.Config{})
	ex.HandleFunc("email.send", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	_ = ex.Start(context.Background())

	cfg, err := mysql.ParseDSN(mirrortest.ServerDSN())
	if err != nil {
		panic(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	name := "ax_example_" + strings.ToLower(nuid.Next())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		panic(err)
	}
	cfg.DBName = name
	db, _ = sql.Open("mysql", cfg.FormatDSN())
	return srv.URL(), db, func() {
		db.Close()
		_, _ = admin.Exec("DROP DATABASE " + name)
		admin.Close()
		_ = ex.Stop(context.Background())
		_ = orch.Stop(context.Background())
		enc.Close()
		onc.Close()
		srv.Stop()
		os.RemoveAll(dir)
	}
}

func Example() {
	url, db, stop := exampleEnv()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := outbox.Migrate(ctx, db); err != nil { // creates ax_outbox (ax relay does too)
		panic(err)
	}
	_, _ = db.ExecContext(ctx, "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY)")

	// The business transaction: the order and its e-mail task commit together.
	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES ('order-42')")
	spec, _ := task.New("email.send", map[string]string{"order": "order-42"})
	spec.ID = "order-42-confirmation" // optional; fixed here either way, so the task is created once
	if _, err := outbox.Enqueue(ctx, tx, spec); err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// The relay (usually `ax relay` in its own process) publishes the row.
	nc, _ := nats.Connect(url)
	defer nc.Close()
	relay, _ := outbox.NewRelay(db, nc, outbox.Config{})
	if err := relay.Start(ctx); err != nil {
		panic(err)
	}
	defer relay.Stop(context.Background())
	_ = outbox.Notify(nc) // wake the relays now rather than at their next poll

	c, _ := sdk.New(ctx, nc)
	t, err := c.Wait(ctx, "order-42-confirmation")
	if err != nil {
		panic(err)
	}
	fmt.Println(t.ID, t.State)
	// Output: order-42-confirmation succeeded
}

func ExampleEnqueueGraph() {
	url, db, stop := exampleEnv()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = outbox.Migrate(ctx, db)

	tx, _ := db.BeginTx(ctx, nil)
	draft, _ := task.New("email.send", nil)
	send, _ := task.New("email.send", nil)
	draft.ID, send.ID = "draft-7", "send-7"
	send.DependsOn = []string{"draft-7"}
	if _, err := outbox.EnqueueGraph(ctx, tx, []task.Spec{draft, send}); err != nil {
		panic(err)
	}
	_ = tx.Rollback() // changed our mind: nothing is ever submitted

	tx, _ = db.BeginTx(ctx, nil)
	draft.ID, send.ID = "draft-8", "send-8"
	send.DependsOn = []string{"draft-8"}
	_, _ = outbox.EnqueueGraph(ctx, tx, []task.Spec{draft, send})
	_ = tx.Commit()

	nc, _ := nats.Connect(url)
	defer nc.Close()
	relay, _ := outbox.NewRelay(db, nc, outbox.Config{Interval: 10 * time.Millisecond})
	_ = relay.Start(ctx)
	defer relay.Stop(context.Background())
	c, _ := sdk.New(ctx, nc)
	t, _ := c.Wait(ctx, "send-8")
	_, err := c.Get(ctx, "send-7")
	fmt.Println(t.ID, t.State, "/ send-7:", err)
	// Output: send-8 succeeded / send-7: task not found: send-7
}
