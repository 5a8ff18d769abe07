package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/task"
)

// TestRelayCommands runs `ax relay` against a real stack and MariaDB (a
// database of its own): a row enqueued in a committed transaction becomes a
// task that runs, `ax relay status` shows the row pending before and none
// after, and the relay exits 0 when its context ends.
func TestRelayCommands(t *testing.T) {
	t.Setenv(envMySQLDSN, "")
	srv := testenv.NATS(t)
	url := srv.URL()
	testenv.Orchestrator(t, url, orchestrator.Config{})
	ex := testenv.Executor(t, url, executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	dsn, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 2*time.Minute)

	status := func() outbox.Backlog {
		t.Helper()
		code, out, errOut := runCLI(ctx, "relay", "status", "--mysql-dsn", dsn, "-o", "json")
		if code != 0 {
			t.Fatalf("ax relay status: exit %d: %s", code, errOut)
		}
		checkJSONContract(t, "relay status", out)
		var b outbox.Backlog
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("ax relay status -o json: %v\n%s", err, out)
		}
		return b
	}

	// The application's side: the table, and a row in its transaction.
	if _, err := outbox.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := outbox.Enqueue(ctx, tx, task.Spec{ID: "relayed-1", Type: demo.TypeNoop, Payload: json.RawMessage(`{"order":42}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if b := status(); b.Pending != 1 {
		t.Fatalf("relay status before the relay runs: %+v, want 1 pending row", b)
	}
	code, out, errOut := runCLI(ctx, "relay", "status", "--mysql-dsn", dsn)
	if code != 0 || !strings.Contains(out, "Pending rows") || !strings.Contains(out, "Oldest pending") {
		t.Fatalf("ax relay status table: exit %d: %s%s", code, out, errOut)
	}

	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	var relayCode int
	var relayErr string
	go func() {
		defer close(relayDone)
		relayCode, _, relayErr = runCLI(rctx, "--nats", url, "--log-level", "error", "relay", "--mysql-dsn", dsn, "--interval", "100ms")
	}()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	got, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("the relayed task: %v", err)
	}
	if got.State != task.Succeeded || got.Type != demo.TypeNoop || string(got.Payload) != `{"order":42}` {
		t.Fatalf("the relayed task: %+v", got)
	}
	testenv.Eventually(t, time.Minute, "the row marked sent", func() bool { return status().Pending == 0 })

	stopRelay()
	<-relayDone
	if relayCode != 0 {
		t.Fatalf("ax relay exited %d after its context ended: %s", relayCode, relayErr)
	}
}
