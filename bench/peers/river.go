package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// RiverOptions configure River's run.
type RiverOptions struct {
	// URL of the PostgreSQL server; its database part is ignored: the run
	// creates a database of its own through the `postgres` database.
	URL string
	// FetchCooldown is River's minimum time between two fetches (its
	// default is 100 ms; 10 ms is the tuned setting of issue 17).
	FetchCooldown time.Duration
	// MaxConns of the pgx pool.
	MaxConns int32
}

// riverJob is the no-op job's args.
type riverJob struct{ args }

// Kind names the job kind.
func (riverJob) Kind() string { return "ax_peers_noop" }

// riverWorker records each start and returns at once.
type riverWorker struct {
	river.WorkerDefaults[riverJob]
	cur *current
}

// Work records the job's start.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverJob]) error {
	w.cur.started(job.Args.args, time.Now())
	return nil
}

// riverDriver submits through River's InsertManyFast (COPY FROM).
type riverDriver struct {
	client *river.Client[pgx.Tx]
}

func (d riverDriver) submit(ctx context.Context, ids []string) error {
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: riverJob{args{ID: id, SubmitNanos: time.Now().UnixNano()}}}
	}
	if _, err := d.client.InsertManyFast(ctx, params); err != nil {
		return fmt.Errorf("river insert %d jobs: %w", len(ids), err)
	}
	return nil
}

// settle has nothing to wait for: River reports a completion only after
// its completer committed it.
func (riverDriver) settle(context.Context) (time.Time, error) { return time.Time{}, nil }

// randomName returns prefix followed by 8 random hex digits.
func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// pgConfig parses url for database db.
func pgConfig(url, db string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	pc.ConnConfig.Database = db
	return pc, nil
}

// riverDurability reads the settings that decide whether a commit
// survives a machine crash.
func riverDurability(ctx context.Context, pool *pgxpool.Pool) (Durability, error) {
	d := Durability{Settings: map[string]string{}}
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return d, fmt.Errorf("show server_version: %w", err)
	}
	d.Server = "PostgreSQL " + strings.Fields(version)[0]
	for _, name := range []string{"synchronous_commit", "fsync"} {
		var v string
		if err := pool.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			return d, fmt.Errorf("show %s: %w", name, err)
		}
		d.Settings[name] = v
	}
	d.Durable = d.Settings["fsync"] == "on" && d.Settings["synchronous_commit"] != "off"
	if d.Durable {
		d.Summary = "durable: each insert and each completion is a transaction whose commit is flushed to disk (WAL fsync) before it returns"
	} else {
		d.Summary = "NOT durable against a machine crash: commits return before the WAL is on disk (the last moments of acknowledged work can be lost)"
	}
	return d, nil
}

// runRiver runs cfg's phases on River in a database of its own, created
// and migrated for the run and dropped after.
func runRiver(ctx context.Context, cfg Config, opt RiverOptions, log *slog.Logger) (res Result, err error) {
	res = Result{System: "River", Version: moduleVersion("github.com/riverqueue/river")}
	admin, err := pgConfig(opt.URL, "postgres")
	if err != nil {
		return res, err
	}
	aconn, err := pgx.ConnectConfig(ctx, admin.ConnConfig)
	if err != nil {
		return res, fmt.Errorf("connect to postgres: %w", err)
	}
	defer aconn.Close(context.Background())
	db := randomName("ax_peers_")
	if _, err := aconn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return res, fmt.Errorf("create database %s: %w", db, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, derr := aconn.Exec(dctx, "DROP DATABASE "+db+" WITH (FORCE)"); derr != nil && err == nil {
			err = fmt.Errorf("drop database %s: %w", db, derr)
		}
	}()

	pc, err := pgConfig(opt.URL, db)
	if err != nil {
		return res, err
	}
	pc.MaxConns = opt.MaxConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return res, fmt.Errorf("connect to %s: %w", db, err)
	}
	defer pool.Close()
	if res.Durability, err = riverDurability(ctx, pool); err != nil {
		return res, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: log})
	if err != nil {
		return res, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, fmt.Errorf("river migrate: %w", err)
	}

	var cur current
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{cur: &cur})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		FetchCooldown: opt.FetchCooldown,
		Workers:       workers,
		Logger:        log,
	})
	if err != nil {
		return res, fmt.Errorf("river client: %w", err)
	}
	res.Store = db
	res.Tuning = fmt.Sprintf("%d workers (MaxWorkers), FetchCooldown %s, LISTEN/NOTIFY, InsertManyFast (COPY) in batches of %d; pgx pool of %d; database %s (dropped after)",
		cfg.Workers, opt.FetchCooldown, chunk, opt.MaxConns, db)
	res.Notes = []string{"done = River's job_completed event, sent after its completer committed the job's completed state"}

	// Every completion event is needed: River drops events that overflow
	// the subscription's buffer.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
		ChanSize: cfg.Tasks + int(float64(cfg.Rate)*cfg.Duration.Seconds()) + 1000,
	})
	var drained sync.WaitGroup
	drained.Add(1)
	go func() {
		defer drained.Done()
		for ev := range events {
			now := time.Now()
			var a args
			if json.Unmarshal(ev.Job.EncodedArgs, &a) == nil {
				cur.finished(a, now)
			}
		}
	}()
	defer drained.Wait()
	defer unsubscribe()

	if err := client.Start(ctx); err != nil {
		return res, fmt.Errorf("river start: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := client.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("river stop: %w", serr)
		}
	}()

	if res.Phases, err = runPhases(ctx, riverDriver{client: client}, &cur, cfg); err != nil {
		return res, err
	}
	res.Checked, res.Reruns, err = riverCheck(ctx, pool, &cur, res.Phases)
	return res, err
}

// riverCheck verifies in river_job that every submitted job is completed
// and nothing else is there, and counts the jobs that ran twice.
func riverCheck(ctx context.Context, pool *pgxpool.Pool, cur *current, phases []Phase) (string, int, error) {
	want := 0
	for _, p := range phases {
		want += p.Tasks
	}
	rows, err := pool.Query(ctx, "SELECT state::text, count(*) FROM river_job GROUP BY state")
	if err != nil {
		return "", 0, fmt.Errorf("count river_job: %w", err)
	}
	states := map[string]int{}
	var state string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { states[state] = n; return nil }); err != nil {
		return "", 0, fmt.Errorf("count river_job: %w", err)
	}
	if states["completed"] != want || len(states) > 1 {
		return "", 0, fmt.Errorf("river_job holds %v, want %d completed", states, want)
	}
	jobs, extra := cur.reruns()
	return fmt.Sprintf("river_job holds %d completed jobs and nothing else; %s", want, onceText(jobs, extra)), jobs, nil
}
