package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// AsynqOptions configure Asynq's run.
type AsynqOptions struct {
	// Addr of the Redis server (host:port).
	Addr string
	// CheckInterval is Asynq's TaskCheckInterval, its sleep when the
	// queues are empty (its default is 1 s; 10 ms is the tuned setting of
	// issue 17).
	CheckInterval time.Duration
	// Enqueuers is how many goroutines enqueue at once: Asynq has no batch
	// enqueue, so its client is driven concurrently over its connection pool.
	Enqueuers int
}

// asynqKind is the no-op task's type.
const asynqKind = "ax_peers_noop"

// ownerKey marks a Redis database as taken by a run.
const ownerKey = "ax_peers:owner"

// asynqDriver submits through Asynq's client, Enqueuers at a time.
type asynqDriver struct {
	client    *asynq.Client
	rdb       *redis.Client
	queue     string
	enqueuers int
}

func (d asynqDriver) submit(ctx context.Context, ids []string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(d.enqueuers)
	for _, id := range ids {
		g.Go(func() error {
			payload, err := json.Marshal(args{ID: id, SubmitNanos: time.Now().UnixNano()})
			if err != nil {
				return err
			}
			if _, err := d.client.EnqueueContext(gctx, asynq.NewTask(asynqKind, payload), asynq.Queue(d.queue)); err != nil {
				return fmt.Errorf("asynq enqueue %s: %w", id, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// key names one of the queue's keys (Asynq's layout: asynq:{queue}:name).
func (d asynqDriver) key(name string) string { return "asynq:{" + d.queue + "}:" + name }

// settle waits until the queue's pending and active lists are empty: Asynq
// removes a task from its active list after the handler returned.
func (d asynqDriver) settle(ctx context.Context) (time.Time, error) {
	for {
		pipe := d.rdb.Pipeline()
		pending := pipe.LLen(ctx, d.key("pending"))
		active := pipe.LLen(ctx, d.key("active"))
		if _, err := pipe.Exec(ctx); err != nil {
			return time.Time{}, fmt.Errorf("asynq queue lengths: %w", err)
		}
		if pending.Val() == 0 && active.Val() == 0 {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("asynq queue still holds %d pending, %d active: %w", pending.Val(), active.Val(), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// claimRedisDB takes the first database from 15 down to 1 that is empty,
// marking it with ownerKey so that a concurrent run skips it.
func claimRedisDB(ctx context.Context, addr, owner string) (*redis.Client, int, error) {
	for db := 15; db >= 1; db-- {
		rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
		ok, err := rdb.SetNX(ctx, ownerKey, owner, 0).Result()
		if err != nil {
			rdb.Close()
			return nil, 0, fmt.Errorf("claim redis db %d: %w", db, err)
		}
		if ok {
			n, err := rdb.DBSize(ctx).Result()
			if err == nil && n == 1 {
				return rdb, db, nil
			}
			rdb.Del(ctx, ownerKey)
		}
		rdb.Close()
	}
	return nil, 0, errors.New("no empty redis database among 1..15")
}

// asynqDurability reads the settings that decide what Redis keeps on disk.
func asynqDurability(ctx context.Context, rdb *redis.Client) (Durability, error) {
	d := Durability{Settings: map[string]string{}}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return d, fmt.Errorf("redis info: %w", err)
	}
	d.Server = "Redis"
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			d.Server += " " + v
		}
	}
	for _, name := range []string{"appendonly", "appendfsync", "save"} {
		kv, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return d, fmt.Errorf("redis config get %s: %w", name, err)
		}
		d.Settings[name] = kv[name]
	}
	switch {
	case d.Settings["appendonly"] == "yes" && d.Settings["appendfsync"] == "always":
		d.Durable = true
		d.Summary = "durable: every write is in the append-only file, fsynced, before Redis replies"
	case d.Settings["appendonly"] == "yes":
		d.Summary = "NOT durable against a machine crash: the append-only file is fsynced " + d.Settings["appendfsync"] + ", so the last writes before a crash are lost"
	case d.Settings["save"] != "":
		d.Summary = "NOT durable: no append-only file; RDB snapshots (save " + d.Settings["save"] + ") lose everything since the last one on a Redis or machine crash"
	default:
		d.Summary = "NOT durable: Redis keeps nothing on disk (no append-only file, no snapshots); a Redis or machine crash loses every queued job"
	}
	return d, nil
}

// runAsynq runs cfg's phases on Asynq in an empty Redis database of its
// own and a queue of its own, whose keys are deleted after.
func runAsynq(ctx context.Context, cfg Config, opt AsynqOptions) (res Result, err error) {
	res = Result{System: "Asynq", Version: moduleVersion("github.com/hibiken/asynq")}
	owner := randomName("ax_peers_")
	rdb, db, err := claimRedisDB(ctx, opt.Addr, owner)
	if err != nil {
		return res, err
	}
	defer rdb.Close()
	queue := owner
	d := asynqDriver{rdb: rdb, queue: queue, enqueuers: opt.Enqueuers}
	defer func() {
		if cerr := asynqCleanup(rdb, d); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if res.Durability, err = asynqDurability(ctx, rdb); err != nil {
		return res, err
	}
	res.Store = fmt.Sprintf("db %d, queue %s", db, queue)
	res.Tuning = fmt.Sprintf("%d workers (Concurrency), TaskCheckInterval %s, %d concurrent enqueuers (no batch enqueue); Redis db %d, queue %s (its keys deleted after)",
		cfg.Workers, opt.CheckInterval, opt.Enqueuers, db, queue)
	res.Notes = []string{
		"done = the handler returned; Asynq then removes the task from Redis (not awaited by the handler)",
		"a phase ends when Redis's pending and active lists of the queue are empty",
	}

	var cur current
	conn := asynq.RedisClientOpt{Addr: opt.Addr, DB: db}
	srv := asynq.NewServer(conn, asynq.Config{
		Concurrency:       cfg.Workers,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: opt.CheckInterval,
		LogLevel:          asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqKind, func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		var a args
		if err := json.Unmarshal(t.Payload(), &a); err != nil {
			return err
		}
		cur.started(a, now)
		cur.finished(a, time.Now())
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return res, fmt.Errorf("asynq server start: %w", err)
	}
	defer srv.Shutdown()
	d.client = asynq.NewClient(conn)
	defer d.client.Close()

	if res.Phases, err = runPhases(ctx, d, &cur, cfg); err != nil {
		return res, err
	}
	res.Checked, res.Reruns, err = asynqCheck(ctx, d, &cur, res.Phases)
	return res, err
}

// asynqCheck verifies in Redis that the queue processed every submitted
// job and holds nothing else, and counts the jobs that ran twice.
func asynqCheck(ctx context.Context, d asynqDriver, cur *current, phases []Phase) (string, int, error) {
	want := 0
	for _, p := range phases {
		want += p.Tasks
	}
	pipe := d.rdb.Pipeline()
	processed := pipe.Get(ctx, d.key("processed"))
	failed := pipe.Get(ctx, d.key("failed"))
	lists := map[string]*redis.IntCmd{}
	for _, l := range []string{"pending", "active"} {
		lists[l] = pipe.LLen(ctx, d.key(l))
	}
	for _, z := range []string{"scheduled", "retry", "archived"} {
		lists[z] = pipe.ZCard(ctx, d.key(z))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("asynq queue counts: %w", err)
	}
	p, _ := processed.Int()
	f, _ := failed.Int()
	for name, n := range lists {
		if n.Val() != 0 {
			return "", 0, fmt.Errorf("asynq queue %s holds %d %s tasks after the run", d.queue, n.Val(), name)
		}
	}
	if p != want || f != 0 {
		return "", 0, fmt.Errorf("asynq counted %d processed and %d failed, want %d processed", p, f, want)
	}
	jobs, extra := cur.reruns()
	return fmt.Sprintf("Asynq counted %d processed, 0 failed, and its queue is empty; %s", want, onceText(jobs, extra)), jobs, nil
}

// asynqCleanup deletes the run's queue keys and its claim on the
// database; it deletes nothing else, and says what else it finds there.
func asynqCleanup(rdb *redis.Client, d asynqDriver) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "asynq:{"+d.queue+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan asynq keys: %w", err)
	}
	pipe := rdb.Pipeline()
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		pipe.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
	pipe.SRem(ctx, "asynq:queues", d.queue)
	pipe.Del(ctx, ownerKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("delete asynq keys: %w", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err == nil && n > 0 {
		left, _ := rdb.Keys(ctx, "*").Result()
		fmt.Fprintf(os.Stderr, "peers: redis db still holds %d keys after cleanup, left alone: %v\n", n, left[:min(len(left), 10)])
	}
	return nil
}
