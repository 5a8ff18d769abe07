package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// A shardable type: the planner splits a range of days into one shard per
// day, each shard counts that day's orders, the aggregator adds them up.
func ExampleExecutor_HandleShards() {
	dir, _ := os.MkdirTemp("", "ax-example-")
	defer os.RemoveAll(dir)
	srv, err := natsserver.Start(natsserver.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	onc, _ := nats.Connect(srv.URL())
	defer onc.Close()
	orch, _ := orchestrator.New(onc, orchestrator.Config{})
	_ = orch.Start(ctx)
	defer orch.Stop(context.Background())

	enc, _ := nats.Connect(srv.URL())
	defer enc.Close()
	ex, _ := executor.New(enc, executor.Config{})
	ex.HandleShards("orders.count", executor.Sharded{
		Plan: func(_ context.Context, j *executor.Job) ([]executor.Shard, error) {
			var days int
			if err := json.Unmarshal(j.Payload, &days); err != nil {
				return nil, executor.Permanent(err)
			}
			shards := make([]executor.Shard, days)
			for d := range shards {
				shards[d].Payload = d
			}
			return shards, nil
		},
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			var day int
			_ = json.Unmarshal(j.Payload, &day)
			return 100 + day, nil // the day's order count
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			total := 0
			for _, o := range s.Shards {
				var n int
				_ = json.Unmarshal(o.Result, &n)
				total += n
			}
			return total, nil
		},
	})
	_ = ex.Start(ctx)
	defer ex.Stop(context.Background())

	c, _ := sdk.Connect(ctx, srv.URL())
	defer c.Close()
	spec, _ := task.New("orders.count", 7)
	spec.Shardable = true
	spec.MaxParallelShards = 3 // at most three days counted at once
	id, _ := c.Submit(ctx, spec)
	t, _ := c.Wait(ctx, id)
	p, _ := c.Shards(ctx, id)
	fmt.Println(t.State, string(t.Result), p.Total, p.Ended[task.Succeeded])
	// Output: succeeded 721 7 7
}
