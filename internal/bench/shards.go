package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TypeShards is the shardable no-op type of the shards bench.
const TypeShards = "bench.shards"

// ShardsConfig configures a shards bench.
type ShardsConfig struct {
	// Sizes are the shard counts to run, one job each on a fresh embedded
	// server (so one size's history does not slow the next).
	Sizes []int
	// MaxParallel is the jobs' max_parallel_shards (0: no limit).
	MaxParallel int
	// Capacity of the executor. Default 512.
	Capacity float64
	Logger   *zerolog.Logger
}

// ShardsRun is one sharded job's figures, taken from its parent's history.
type ShardsRun struct {
	Shards int `json:"shards"`
	// Register is from the planner's report (running → waiting) to the
	// shards_registered event: creating every shard task.
	Register time.Duration `json:"register"`
	// FanIn is from the planner's report until the last shard ended (the
	// parent moved on to its aggregator): registering, running and counting.
	FanIn time.Duration `json:"fan_in"`
	// Aggregate is the aggregator's step (reads every marker once).
	Aggregate time.Duration `json:"aggregate"`
	// Total is submit → parent succeeded.
	Total        time.Duration `json:"total"`
	ShardsPerSec float64       `json:"shards_per_sec"`
	// ReadsPerShard is the orchestrator's task-record reads over the job
	// divided by the shards: constant if completing a shard never reads
	// its siblings.
	ReadsPerShard float64 `json:"reads_per_shard"`
}

// Shards runs one sharded job of no-op shards per configured size.
func Shards(ctx context.Context, cfg ShardsConfig) ([]ShardsRun, error) {
	if cfg.Capacity <= 0 {
		cfg.Capacity = 512
	}
	var out []ShardsRun
	for _, n := range cfg.Sizes {
		r, err := shardsRun(ctx, cfg, n)
		if err != nil {
			return out, fmt.Errorf("%d shards: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func shardsRun(ctx context.Context, cfg ShardsConfig, n int) (ShardsRun, error) {
	res := ShardsRun{Shards: n}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	dir, err := os.MkdirTemp("", "ax-bench-shards-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.Start(natsserver.Config{StoreDir: dir})
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	st, err := startStack(ctx, stackConfig{url: srv.URL(), topo: orchestrator.TopologyOptions{Replicas: 1}, capacity: cfg.Capacity,
		orchestrators: 1, log: log, register: func(ex *executor.Executor) {
			ex.HandleShards(TypeShards, executor.Sharded{
				Plan: func(context.Context, *executor.Job) ([]executor.Shard, error) {
					shards := make([]executor.Shard, n)
					for i := range shards {
						shards[i].Payload = i
					}
					return shards, nil
				},
				Shard: func(context.Context, *executor.Job) (any, error) { return nil, nil },
				Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
					if s.Succeeded != n {
						return nil, fmt.Errorf("%d of %d shards succeeded", s.Succeeded, n)
					}
					return s.Succeeded, nil
				},
			})
		}})
	if err != nil {
		return res, err
	}
	defer st.close()
	orch, connect := st.orchs[0], st.connect
	cnc, err := connect()
	if err != nil {
		return res, err
	}
	client, err := sdk.New(ctx, cnc)
	if err != nil {
		return res, err
	}

	spec, _ := task.New(TypeShards, nil)
	spec.ID, spec.Shardable, spec.MaxParallelShards = fmt.Sprintf("bench-%d", n), true, cfg.MaxParallel
	reads := orch.StoreReads()
	if _, err := client.Submit(ctx, spec); err != nil {
		return res, err
	}
	t, err := client.Wait(ctx, spec.ID)
	if err != nil {
		return res, err
	}
	if t.State != task.Succeeded {
		return res, fmt.Errorf("job %s is %s: %s", t.ID, t.State, t.Reason)
	}
	res.ReadsPerShard = float64(orch.StoreReads()-reads) / float64(max(n, 1))
	h, err := client.History(ctx, spec.ID)
	if err != nil {
		return res, err
	}
	var planned, registered, aggregating time.Time
	for _, ev := range h {
		e := ev.Event
		switch {
		case e.EndsAttempt() && e.To == task.Waiting: // the planner ended
			planned = e.At
		case e.Kind == task.KindShardsRegistered:
			registered = e.At
		case e.From == task.Waiting && e.To == task.Ready && e.Task.Phase == task.PhaseAggregate:
			aggregating = e.At
		}
	}
	res.Register = registered.Sub(planned)
	res.FanIn = aggregating.Sub(planned)
	res.Aggregate = t.FinishedAt.Sub(aggregating)
	res.Total = t.FinishedAt.Sub(t.SubmittedAt)
	res.ShardsPerSec = float64(n) / res.FanIn.Seconds()
	return res, nil
}
