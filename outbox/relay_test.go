package outbox_test

import (
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
)

// TestTwoRelaysRace: two relays work through 10,000 rows at once; together
// they publish every row exactly once (neither publishes a row the other
// claimed), and each row is one task.
func TestTwoRelaysRace(t *testing.T) {
	t.Parallel()
	twoRelaysRace(t, false)
}

// TestTwoRelaysRaceGroupCommit: the same with group commit on, where the
// relays store their batches as atomic batches.
func TestTwoRelaysRaceGroupCommit(t *testing.T) {
	t.Parallel()
	twoRelaysRace(t, true)
}

func twoRelaysRace(t *testing.T, groupCommit bool) {
	const n = 10_000
	_, db := newDB(t)
	a := startAXWith(t, orchestrator.Config{Topology: orchestrator.TopologyOptions{GroupCommit: &groupCommit}})
	ctx := testenv.Context(t, 3*time.Minute)
	// Count the submissions published in atomic batches.
	var batched atomic.Int64
	sub, err := a.client.Conn().Subscribe("task.>", func(m *nats.Msg) {
		if m.Header.Get("Nats-Batch-Id") != "" {
			batched.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	specs := noops(n, "race")
	enqueueCommitted(t, db, specs)
	cfg := outbox.Config{BatchSize: 250}
	r1 := startRelay(t, db, a.url, cfg)
	r2 := startRelay(t, db, a.url, cfg)
	testenv.Eventually(t, 2*time.Minute, "every row relayed", func() bool { return pendingRows(ctx, db) == 0 })
	// Stats count a batch after its commit: wait for the last one.
	testenv.Eventually(t, 10*time.Second, "relay stats", func() bool { return r1.Stats().Rows+r2.Stats().Rows >= n })
	s1, s2 := r1.Stats(), r2.Stats()
	t.Logf("relay 1 published %d rows in %d batches, relay 2 %d in %d", s1.Rows, s1.Batches, s2.Rows, s2.Batches)
	if s1.Rows+s2.Rows != n {
		t.Fatalf("relays published %d + %d rows, want %d in all (a row published twice?)", s1.Rows, s2.Rows, n)
	}
	waitTasks(t, a.client, "race", n, 2*time.Minute)
	checkOneCreation(t, a.client, idsOf(specs[:200]))
	if got := batched.Load(); (got > 0) != groupCommit {
		t.Fatalf("with group commit %v, %d submissions were published in atomic batches", groupCommit, got)
	}
}

// TestRelayMySQLCut: MySQL goes away under a relay (a proxy between them
// closes every connection and refuses new ones) while rows keep being
// committed; once it is back every row is relayed, each one task.
func TestRelayMySQLCut(t *testing.T) {
	t.Parallel()
	dsn, db := newDB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, cfg.Addr)
	cfg.Addr = p.Addr()
	relayDB := openDSN(t, cfg.FormatDSN())
	a := startAX(t)
	ctx := testenv.Context(t, 3*time.Minute)
	relay := startRelay(t, relayDB, a.url, outbox.Config{BatchSize: 50, Interval: 50 * time.Millisecond})

	specs := noops(600, "cut")
	enqueueCommitted(t, db, specs[:200])
	testenv.Eventually(t, time.Minute, "the relay publishing", func() bool { return relay.Stats().Rows > 0 })
	p.Cut()
	enqueueCommitted(t, db, specs[200:400]) // directly, not through the proxy
	failures := relay.Stats().Failures
	testenv.Eventually(t, time.Minute, "the relay noticing MySQL is gone", func() bool { return relay.Stats().Failures > failures })
	p.Restore()
	enqueueCommitted(t, db, specs[400:])
	testenv.Eventually(t, 2*time.Minute, "every row relayed", func() bool { return pendingRows(ctx, db) == 0 })
	waitTasks(t, a.client, "cut", len(specs), 2*time.Minute)
	checkOneCreation(t, a.client, idsOf(specs))
	t.Logf("relay: %+v", relay.Stats())
}

// TestRelayNATSDown: while NATS is down rows wait in the outbox (the relay
// keeps failing and retrying); when it is back they flow, each one task.
func TestRelayNATSDown(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	store := t.TempDir()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	url := srv.URL()
	var cur = srv
	t.Cleanup(func() { cur.Stop() })
	testenv.Orchestrator(t, url, orchestrator.Config{})
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, 3*time.Minute)
	relay := startRelay(t, db, url, outbox.Config{Interval: 50 * time.Millisecond, PublishTimeout: time.Second, RetryMax: 500 * time.Millisecond})

	specs := noops(300, "down")
	enqueueCommitted(t, db, specs[:100])
	waitTasks(t, c, "down", 100, time.Minute)

	cur.Stop()
	enqueueCommitted(t, db, specs[100:])
	failures := relay.Stats().Failures
	testenv.Eventually(t, time.Minute, "the relay failing while NATS is down", func() bool { return relay.Stats().Failures >= failures+3 })
	if n := pendingRows(ctx, db); n != 200 {
		t.Fatalf("%d rows pending while NATS is down, want 200", n)
	}
	if cur, err = natsserver.Start(natsserver.Config{StoreDir: store, Port: port}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, "every row relayed", func() bool { return pendingRows(ctx, db) == 0 })
	waitTasks(t, c, "down", len(specs), 2*time.Minute)
	checkOneCreation(t, c, idsOf(specs))
	t.Logf("relay: %+v", relay.Stats())
}
