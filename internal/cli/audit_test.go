package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// runCLI runs the ax command line in-process.
func runCLI(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestMirrorAndAuditCommands runs `ax mirror` against a real stack and
// MariaDB, then every `ax audit` subcommand in table and JSON form.
func TestMirrorAndAuditCommands(t *testing.T) {
	t.Setenv(envMySQLDSN, "")
	srv := testenv.NATS(t)
	url := srv.URL()
	testenv.Orchestrator(t, url, orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, url, executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	dsn, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 60*time.Second)

	// ax mirror, as its own "process".
	mctx, stopMirror := context.WithCancel(ctx)
	mirrorDone := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(mctx, "--nats", url, "--log-level", "error", "mirror", "--mysql-dsn", dsn, "--lag-interval", "100ms")
		mirrorDone <- code
	}()

	flaky, err := c.Submit(ctx, task.Spec{Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":1}`), Priority: new(1), MaxRetries: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	failing, err := c.Submit(ctx, task.Spec{Type: demo.TypeFail, Priority: new(1), MaxRetries: new(0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{flaky, failing} {
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// A dependent of the failed task: cancelled by it.
	dep, err := c.Submit(ctx, task.Spec{Type: demo.TypeNoop, DependsOn: []string{failing}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "both tasks mirrored as finished, and the dependent cancelled", func() bool {
		var n, cancelled int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*), (SELECT COUNT(*) FROM ax_tasks WHERE id = ? AND state = 'cancelled') FROM ax_tasks WHERE state IN ('succeeded','failed')", dep).Scan(&n, &cancelled)
		return err == nil && n == 2 && cancelled == 1
	})

	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(ctx, append([]string{"--nats", url}, args...)...)
		if code != 0 {
			t.Fatalf("ax %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	auditRun := func(args ...string) string { return run(append([]string{"audit", "--mysql-dsn", dsn}, args...)...) }

	t.Run("timeline", func(t *testing.T) {
		out := auditRun("timeline", flaky)
		t.Log("\n" + out)
		for _, want := range []string{"state succeeded", "Events:", "retrying", "Attempts:", "simulated failure 1 of 1", "succeeded"} {
			if !strings.Contains(out, want) {
				t.Fatalf("timeline lacks %q:\n%s", want, out)
			}
		}
		var tl audit.Timeline
		if err := json.Unmarshal([]byte(auditRun("-o", "json", "timeline", flaky)), &tl); err != nil {
			t.Fatal(err)
		}
		if tl.Task == nil || tl.Task.State != "succeeded" || len(tl.Attempts) != 2 || len(tl.Events) != 4 {
			t.Fatalf("json timeline %+v", tl)
		}
	})
	t.Run("waiting", func(t *testing.T) {
		if out := auditRun("waiting", failing); !strings.Contains(out, "not waiting: failed") {
			t.Fatalf("waiting:\n%s", out)
		}
		if out := auditRun("waiting", dep); !strings.Contains(out, "ax redrive "+failing+" --with-dependents") {
			t.Fatalf("waiting of a cancelled dependent:\n%s", out)
		}
	})
	t.Run("timeline of a cancelled dependent", func(t *testing.T) {
		out := auditRun("timeline", dep)
		for _, want := range []string{"Trigger rule: all_succeeded (over 1 dependencies)", "Cancelled by: upstream " + failing} {
			if !strings.Contains(out, want) {
				t.Fatalf("timeline lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("failures", func(t *testing.T) {
		out := auditRun("failures", "--since", "1h")
		t.Log("\n" + out)
		if !strings.Contains(out, "demo.fail") || !strings.Contains(out, "simulated downstream outage") {
			t.Fatalf("failures:\n%s", out)
		}
		var gs []audit.FailureGroup
		if err := json.Unmarshal([]byte(auditRun("failures", "--since", "1h", "--type", "demo.flaky", "-o", "json")), &gs); err != nil {
			t.Fatal(err)
		}
		if len(gs) != 1 || gs[0].Type != "demo.flaky" || gs[0].SampleTaskID != flaky {
			t.Fatalf("flaky failures %+v", gs)
		}
	})
	t.Run("stuck", func(t *testing.T) {
		if out := auditRun("stuck", "--state", "running", "--older-than", "1m"); strings.Count(out, "\n") != 1 {
			t.Fatalf("nothing should be stuck:\n%s", out)
		}
		code, _, errOut := runCLI(ctx, "audit", "--mysql-dsn", dsn, "stuck", "--state", "bogus")
		if code == 0 || !strings.Contains(errOut, "want one of") {
			t.Fatalf("bad state: %d %s", code, errOut)
		}
	})
	t.Run("retries", func(t *testing.T) {
		var rs []audit.RetryStats
		if err := json.Unmarshal([]byte(auditRun("retries", "-o", "json")), &rs); err != nil {
			t.Fatal(err)
		}
		by := map[string]audit.RetryStats{}
		for _, r := range rs {
			by[r.Type] = r
		}
		if by["demo.flaky"].Retries != 1 || by["demo.fail"].DeadLettered != 1 || by["demo.fail"].InDLQ != 1 {
			t.Fatalf("retries %+v", rs)
		}
		if out := auditRun("retries"); !strings.Contains(out, "DEAD-LETTERED") {
			t.Fatalf("retries table:\n%s", out)
		}
	})
	t.Run("mirror lag", func(t *testing.T) {
		testenv.Eventually(t, 10*time.Second, "the lag to read caught up", func() bool {
			_, out, _ := runCLI(ctx, "--nats", url, "mirror", "lag")
			return strings.Contains(out, "caught up")
		})
	})
	t.Run("rebuild", func(t *testing.T) {
		dsn2, db2 := mirrortest.DB(t)
		out := run("--log-level", "error", "audit", "rebuild", "--mysql-dsn", dsn2)
		// 6 events of the flaky and the failing task (short attempts are
		// never marked running), the failing one's dependent_added and its
		// cancelled dependent's creation.
		if !strings.Contains(out, "rebuilt 8 events") {
			t.Fatalf("rebuild: %s", out)
		}
		var n int
		if err := db2.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_events").Scan(&n); err != nil || n != 8 {
			t.Fatalf("rebuilt %d events, %v", n, err)
		}
		var by, rule string
		if err := db2.QueryRowContext(ctx, "SELECT cancelled_by, trigger_rule FROM ax_tasks WHERE id = ?", dep).Scan(&by, &rule); err != nil ||
			by != failing || rule != "all_succeeded" {
			t.Fatalf("rebuilt dependent: cancelled_by %q, trigger_rule %q, %v", by, rule, err)
		}
		code, _, errOut := runCLI(ctx, "--nats", url, "--log-level", "error", "audit", "rebuild", "--mysql-dsn", dsn2)
		if code == 0 || !strings.Contains(errOut, "not empty") {
			t.Fatalf("second rebuild: %d %s", code, errOut)
		}
	})
	t.Run("errors", func(t *testing.T) {
		code, _, errOut := runCLI(ctx, "audit", "timeline", flaky)
		if code == 0 || !strings.Contains(errOut, "no MySQL DSN given") {
			t.Fatalf("no DSN: %d %s", code, errOut)
		}
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName += "_missing"
		code, _, errOut = runCLI(ctx, "audit", "--mysql-dsn", cfg.FormatDSN(), "retries")
		if code == 0 || !strings.Contains(errOut, "does not exist") {
			t.Fatalf("unknown database: %d %s", code, errOut)
		}
		emptyDSN, _ := mirrortest.DB(t)
		code, _, errOut = runCLI(ctx, "audit", "--mysql-dsn", emptyDSN, "retries")
		if code == 0 || !strings.Contains(errOut, "no AX tables yet") {
			t.Fatalf("empty database: %d %s", code, errOut)
		}
		if _, err := startMirror(ctx, testenv.Conn(t, url), "nonsense", *testenv.Logger(t), nil); err == nil ||
			!strings.Contains(err.Error(), "parse MySQL DSN") {
			t.Fatalf("startMirror with a bad DSN: %v", err)
		}
		stop, err := startMirror(ctx, testenv.Conn(t, url), dsn, *testenv.Logger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := stop(ctx); err != nil {
			t.Fatalf("second stop: %v", err)
		}
	})

	stopMirror()
	select {
	case code := <-mirrorDone:
		if code != 0 {
			t.Fatalf("ax mirror exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ax mirror did not stop")
	}
}

// TestAuditShardsCommand mirrors a sharded job two of whose shards fail,
// then checks what `ax audit timeline` and `ax audit shards` show of it.
func TestAuditShardsCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	url := srv.URL()
	testenv.Orchestrator(t, url, orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, url, executor.Config{})
	ex.HandleShards("split", executor.Sharded{
		Plan: func(context.Context, *executor.Job) ([]executor.Shard, error) { return make([]executor.Shard, 6), nil },
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex == 1 || j.ShardIndex == 4 {
				return nil, executor.Permanent(fmt.Errorf("shard %d broken", j.ShardIndex))
			}
			return j.ShardIndex, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			return s.Succeeded, nil
		},
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, url)
	dsn, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 60*time.Second)
	stop, err := startMirror(ctx, testenv.Conn(t, url), dsn, *testenv.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop(context.Background()) })

	parent := task.NewID()
	if _, err := c.Submit(ctx, task.Spec{ID: parent, Type: "split", Shardable: true, MinShardSuccess: 0.5}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, parent); err != nil || got.State != task.Succeeded {
		t.Fatalf("sharded job: %+v, %v", got, err)
	}
	testenv.Eventually(t, 20*time.Second, "the sharded job mirrored as finished", func() bool {
		var state string
		err := db.QueryRowContext(ctx, "SELECT state FROM ax_tasks WHERE id = ?", parent).Scan(&state)
		return err == nil && state == "succeeded"
	})

	auditRun := func(args ...string) string {
		t.Helper()
		args = append([]string{"audit", "--mysql-dsn", dsn}, args...)
		code, out, errOut := runCLI(ctx, args...)
		if code != 0 {
			t.Fatalf("ax %s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	counts := "Shards: 6 in all: 4 succeeded, 2 failed"
	if out := auditRun("timeline", parent); !strings.Contains(out, counts) {
		t.Fatalf("parent timeline lacks %q:\n%s", counts, out)
	}
	if out := auditRun("timeline", task.ShardID(parent, 4)); !strings.Contains(out, "Shard of "+parent+" (#4)") || strings.Contains(out, "Shards:") {
		t.Fatalf("shard timeline:\n%s", out)
	}
	var tl audit.Timeline
	if err := json.Unmarshal([]byte(auditRun("-o", "json", "timeline", parent)), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Shards["succeeded"] != 4 || tl.Shards["failed"] != 2 {
		t.Fatalf("json timeline shards %v", tl.Shards)
	}

	out := auditRun("shards", parent)
	t.Log("\n" + out)
	for _, want := range []string{"state succeeded", counts, "Not succeeded:", task.ShardID(parent, 1), "shard 4 broken"} {
		if !strings.Contains(out, want) {
			t.Fatalf("shards lacks %q:\n%s", want, out)
		}
	}
	if out := auditRun("shards", parent, "--limit", "1"); !strings.Contains(out, "Not succeeded (first 1 of 2)") || strings.Contains(out, "shard 4 broken") {
		t.Fatalf("shards --limit 1:\n%s", out)
	}
	var r audit.ShardReport
	if err := json.Unmarshal([]byte(auditRun("shards", parent, "-o", "json")), &r); err != nil {
		t.Fatal(err)
	}
	if r.Parent != parent || r.Total != 6 || len(r.Failed) != 2 || r.Failed[0].Index != 1 || r.Failed[1].LastError != "shard 4 broken" {
		t.Fatalf("json shards %+v", r)
	}
	code, _, errOut := runCLI(ctx, "audit", "--mysql-dsn", dsn, "shards", task.ShardID(parent, 4))
	if code == 0 || !strings.Contains(errOut, "not a sharded task") {
		t.Fatalf("shards of a shard: %d %s", code, errOut)
	}
}
