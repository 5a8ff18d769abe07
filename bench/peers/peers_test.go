package main

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// The servers the tests use: the flags' defaults unless AX_PEERS_PG or
// AX_PEERS_REDIS say otherwise.
var (
	testPG    = envOr("AX_PEERS_PG", "postgres://postgres@127.0.0.1:5432/")
	testRedis = envOr("AX_PEERS_REDIS", "127.0.0.1:6379")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// tiny is a run small enough for a test: 200 jobs as fast as possible, then
// 100/s for 2 s.
var tiny = Config{Tasks: 200, Rate: 100, Duration: 2 * time.Second, Workers: 50}

func TestRiver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgConfig(testPG, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	conn, err := pgx.ConnectConfig(pctx, admin.ConnConfig)
	pcancel()
	if err != nil {
		t.Skipf("PostgreSQL unreachable at %s (set AX_PEERS_PG): %v", testPG, err)
	}
	defer conn.Close(context.Background())

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := runRiver(ctx, tiny, RiverOptions{URL: testPG, FetchCooldown: 10 * time.Millisecond, MaxConns: 8}, log)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res, "synchronous_commit", "fsync")
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", res.Store).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Store, "ax_peers_") || left != 0 {
		t.Errorf("database %q: %d left after the run, want a dropped ax_peers_* database", res.Store, left)
	}
}

func TestAsynq(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: testRedis})
	defer rdb.Close()
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	err := rdb.Ping(pctx).Err()
	pcancel()
	if err != nil {
		t.Skipf("Redis unreachable at %s (set AX_PEERS_REDIS): %v", testRedis, err)
	}

	res, err := runAsynq(ctx, tiny, AsynqOptions{Addr: testRedis, CheckInterval: 10 * time.Millisecond, Enqueuers: 8})
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, res, "appendonly", "appendfsync", "save")
	// Store is "db N, queue Q": nothing of Q may be left in any database.
	_, queue, _ := strings.Cut(res.Store, "queue ")
	if queue == "" {
		t.Fatalf("store %q names no queue", res.Store)
	}
	for db := range 16 {
		c := redis.NewClient(&redis.Options{Addr: testRedis, DB: db})
		keys, err := c.Keys(ctx, "asynq:{"+queue+"}:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("redis db %d keeps %d keys of queue %s after the run: %v", db, len(keys), queue, keys)
		}
	}
}

// checkResult checks that both phases ran every job once, with positive
// figures, and that the durability settings named were read.
func checkResult(t *testing.T, res Result, settings ...string) {
	t.Helper()
	t.Logf("%s %s: %s; %s", res.System, res.Version, res.Durability.Summary, res.Checked)
	if len(res.Phases) != 2 {
		t.Fatalf("%d phases, want throughput and steady: %+v", len(res.Phases), res.Phases)
	}
	wants := []int{tiny.Tasks, int(float64(tiny.Rate) * tiny.Duration.Seconds())}
	for i, p := range res.Phases {
		t.Logf("%s: %d jobs in %s, %.0f/s, start p50 %s p99 %s, done p50 %s p99 %s", p.Name, p.Tasks, p.Elapsed,
			p.TasksPerSec, p.SubmitToStart.P50, p.SubmitToStart.P99, p.SubmitToDone.P50, p.SubmitToDone.P99)
		if p.Tasks != wants[i] || p.Started != wants[i] || p.Reruns != 0 {
			t.Errorf("%s: %d jobs, %d started, %d extra starts; want %d, each started once", p.Name, p.Tasks, p.Started, p.Reruns, wants[i])
		}
		if p.Elapsed <= 0 || p.TasksPerSec <= 0 || p.SubmitToStart.P50 <= 0 || p.SubmitToDone.P50 <= 0 {
			t.Errorf("%s: figures not all positive: %+v", p.Name, p)
		}
		if p.SubmitToDone.Max < p.SubmitToStart.Max {
			t.Errorf("%s: submit→done max %s below submit→start max %s", p.Name, p.SubmitToDone.Max, p.SubmitToStart.Max)
		}
	}
	if res.Reruns != 0 || !strings.Contains(res.Checked, "every job ran exactly once") {
		t.Errorf("reruns %d, checked %q", res.Reruns, res.Checked)
	}
	for _, s := range settings {
		if _, ok := res.Durability.Settings[s]; !ok {
			t.Errorf("durability setting %s not read: %v", s, res.Durability.Settings)
		}
	}
	if res.Version == "" || res.Durability.Server == "" || res.Durability.Summary == "" {
		t.Errorf("version %q, server %q, summary %q: want all named", res.Version, res.Durability.Server, res.Durability.Summary)
	}
}
