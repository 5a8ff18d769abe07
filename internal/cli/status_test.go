package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// `ax status <parent>` shows a sharded task's phase and shard counts;
// `ax status <shard>` names its parent.
func TestStatusShowsShardProgress(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New(demo.TypeSplit, demo.Params{Shards: 12, Size: 10})
	s.ID, s.Shardable, s.MaxParallelShards = "job", true, 4
	if _, err := c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "job"); err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append(args, "--nats", srv.URL()), &out, &errOut); code != 0 {
			t.Fatalf("ax %v exited %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	out := run("status", "job")
	for _, want := range []string{"Shards: phase aggregate, 12 planned", "succeeded   12", `"shards":12`, "12 shards registered", "aggregating"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if out := run("status", "job/shard/11"); !strings.Contains(out, "Shard of    job (#11)") {
		t.Errorf("shard status:\n%s", out)
	}
	var js struct {
		Shards struct {
			Total int
			Ended map[string]int
		} `json:"shards"`
	}
	if err := json.Unmarshal([]byte(run("status", "job", "-o", "json")), &js); err != nil || js.Shards.Total != 12 || js.Shards.Ended["succeeded"] != 12 {
		t.Fatalf("json status: %+v, %v", js, err)
	}
}
