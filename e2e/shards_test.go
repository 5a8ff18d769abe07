package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

// TestShardsKill9 runs a 10,000-shard job (and a 2,000-shard job limited to
// 50 shards at a time) while the orchestrator is killed with SIGKILL twice:
// once while it registers the shards, once during fan-in. Every shard must
// exist exactly once and run once, and each aggregator must run once with
// every shard's result.
func TestShardsKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o1 := c.startOrchestrator("orch-1")
	c.startWorker("worker-1", "--ack-wait", "5s", "--capacity", "32")
	c.startWorker("worker-2", "--ack-wait", "5s", "--capacity", "32")
	warmUp(t, cl, "default")

	jobs := []struct {
		id             string
		shards, size   int
		maxParallel    int
		sleep          string
		expectedResult demo.SplitResult
	}{
		{id: "big", shards: 10_000, size: 10},
		{id: "limited", shards: 2_000, size: 3, maxParallel: 50, sleep: "2ms"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i, j := range jobs {
		s, _ := task.New(demo.TypeSplit, demo.Params{Shards: j.shards, Size: j.size, Sleep: j.sleep})
		s.ID, s.Shardable, s.MaxParallelShards = j.id, true, j.maxParallel
		if _, err := cl.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		n := j.shards * j.size
		jobs[i].expectedResult = demo.SplitResult{Sum: n * (n - 1) / 2, Shards: j.shards, Succeeded: j.shards}
	}

	// Kill while "big" registers its shards.
	eventually(t, time.Minute, "big registering its shards", func() (bool, string) {
		p, err := cl.Get(ctx, "big")
		if err != nil {
			return false, err.Error()
		}
		return p.Phase == task.PhaseShards, fmt.Sprintf("%s/%s", p.State, p.Phase)
	})
	time.Sleep(300 * time.Millisecond)
	p, _ := cl.Get(ctx, "big")
	o1.kill9()
	t.Logf("killed orch-1 during registration: registered=%v", p.Sharding != nil && p.Sharding.Registered)
	o2 := c.startOrchestrator("orch-2")

	// Kill again once fan-in is well under way.
	eventually(t, 2*time.Minute, "big's shards registered", func() (bool, string) {
		pr, err := cl.Shards(ctx, "big")
		if err != nil {
			return false, err.Error()
		}
		return pr.Registered, fmt.Sprintf("%+v", pr)
	})
	pr, _ := cl.Shards(ctx, "big")
	o2.kill9()
	t.Logf("killed orch-2 during fan-in: %d of %d shards ended", pr.Total-pr.Unfinished, pr.Total)
	c.startOrchestrator("orch-3")

	for _, j := range jobs {
		eventually(t, 3*time.Minute, j.id+" finished", func() (bool, string) {
			p, err := cl.Get(ctx, j.id)
			if err != nil {
				return false, err.Error()
			}
			return p.State.Terminal(), fmt.Sprintf("%s/%s: %s", p.State, p.Phase, p.Reason)
		})
		p, err := cl.Get(ctx, j.id)
		if err != nil || p.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", j.id, p, err)
		}
		var got demo.SplitResult
		if err := json.Unmarshal(p.Result, &got); err != nil || got != j.expectedResult {
			t.Fatalf("%s: aggregate %s, want %+v", j.id, p.Result, j.expectedResult)
		}
	}

	all, err := histories(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		checkShardHistories(t, all, j.id, j.shards, j.maxParallel)
	}
}

// checkShardHistories checks that a parent has exactly its shards, each
// created once and run once, and one aggregate run.
func checkShardHistories(t *testing.T, all map[string][]store.Revisioned, parent string, shards, maxParallel int) {
	t.Helper()
	prefix := parent + "/shard/"
	found := 0
	for id, h := range all {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		found++
		created, runs := 0, 0
		for _, ev := range h {
			if ev.Event.From == "" && ev.Event.Kind == task.KindTransition {
				created++
			}
			if ev.Event.EndsAttempt() {
				runs++
			}
		}
		last := h[len(h)-1].Event.Task
		if created != 1 || runs != 1 || last.State != task.Succeeded || last.Parent != parent {
			t.Errorf("%s: created %d times, ran %d times, ends %s:\n%s", id, created, runs, last.State, describe(h))
		}
	}
	if found != shards {
		t.Errorf("%s has %d shard tasks, want %d", parent, found, shards)
	}
	aggregateRuns := 0
	for _, ev := range all[parent] {
		if ev.Event.EndsAttempt() && ev.Event.Task.Phase == task.PhaseAggregate {
			aggregateRuns++
		}
	}
	if aggregateRuns != 1 {
		t.Errorf("%s: the aggregator ran %d times:\n%s", parent, aggregateRuns, describe(all[parent]))
	}
	if maxParallel > 0 {
		if peak := peakReleased(all, prefix); peak > maxParallel {
			t.Errorf("%s: %d shards released at once, limit %d", parent, peak, maxParallel)
		}
	}
}

// peakReleased is the most shards with prefix that were released (ready,
// running or retrying) at once, in the order of the task stream.
func peakReleased(all map[string][]store.Revisioned, prefix string) int {
	type step struct {
		rev   uint64
		delta int
	}
	var steps []step
	for id, h := range all {
		if !strings.HasPrefix(id, prefix) {
			continue
		}
		for _, ev := range h {
			switch {
			case ev.Event.To == task.Ready && ev.Event.From != task.Ready && ev.Event.From != task.Retrying:
				steps = append(steps, step{ev.Revision, 1})
			case ev.Event.To.Terminal():
				steps = append(steps, step{ev.Revision, -1})
			}
		}
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i].rev < steps[j].rev })
	cur, peak := 0, 0
	for _, s := range steps {
		cur += s.delta
		peak = max(peak, cur)
	}
	return peak
}
