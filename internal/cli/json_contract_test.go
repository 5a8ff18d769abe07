package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// jsonElsewhere are the commands whose -o json another test checks (they
// need MySQL or a long run), and daemons, which print no data: -o json
// changes only how they report a failure.
var jsonElsewhere = map[string]string{
	"audit failures": "audit_test.go", "audit retries": "audit_test.go", "audit shards": "audit_test.go", "audit timeline": "audit_test.go",
	"audit waiting": "audit_test.go", "audit stuck": "audit_test.go", "audit rebuild": "audit_test.go",
	"relay status": "relay_test.go", "bench": "bench_test.go", "bench shards": "bench_test.go", "bench producer": "bench_test.go",
	"plan": "plan_test.go", "poison redrive": "poison_test.go", "version": "version_test.go", "healthcheck": "health_test.go",
	"server": "daemon (with -o json it prints {\"url\", \"store\"} once it listens: commands_test.go)",
	"dev":    "daemon", "orchestrator": "daemon", "worker": "daemon", "console": "daemon", "mirror": "daemon", "relay": "daemon",
}

// TestJSONContractOfEveryCommand runs every data command with -o json and
// checks the contract (one JSON value, snake_case keys, no null, no zero
// time), then the failures: one error shape, one code per cause, whatever
// the command. A command added later without a case here fails the test.
func TestJSONContractOfEveryCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	bare := testenv.BareNATS(t)
	ctx := testenv.Context(t, 2*time.Minute)
	covered := map[string]bool{}
	run := func(args ...string) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code := Run(ctx, append(args, "-o", "json"), &out, &errOut)
		return code, out.String()
	}
	// cmd names the command path of args (its leading words without a dash).
	cmdOf := func(args []string) string {
		var words []string
		for _, a := range args {
			if strings.HasPrefix(a, "-") || len(words) == 2 {
				break
			}
			words = append(words, a)
		}
		path := strings.Join(words, " ")
		for path != "" && !leafCommands()[path] {
			path = path[:max(strings.LastIndex(path, " "), 0)]
		}
		return path
	}
	ok := func(args ...string) any {
		t.Helper()
		covered[cmdOf(args)] = true
		code, out := run(append(args, "--nats", srv.URL())...)
		if code != 0 {
			t.Fatalf("ax %s -o json exited %d:\n%s", strings.Join(args, " "), code, out)
		}
		if strings.Contains(out, "0001-01-01") {
			t.Errorf("ax %s -o json prints a zero time:\n%s", strings.Join(args, " "), out)
		}
		return checkJSONContract(t, strings.Join(args, " "), out)
	}
	fails := func(wantCode string, args ...string) {
		t.Helper()
		covered[cmdOf(args)] = true
		code, out := run(args...)
		var e struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		err := dec.Decode(&e)
		if code != 1 || err != nil || e.Error == nil || e.Error.Message == "" || dec.More() {
			t.Fatalf("ax %s -o json: exit %d, want 1 and one {\"error\":…} (%v):\n%s", strings.Join(args, " "), code, err, out)
		}
		if e.Error.Code != wantCode {
			t.Errorf("ax %s -o json: code %q, want %q (%s)", strings.Join(args, " "), e.Error.Code, wantCode, e.Error.Message)
		}
	}
	field := func(v any, path ...string) any {
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}

	// Submissions: ids, and with --wait each task as it ended.
	if v := ok("submit", demo.TypeNoop, "--id", "j-one"); fmt.Sprint(field(v, "ids")) != "[j-one]" {
		t.Errorf("submit: %v", v)
	}
	v := ok("submit", demo.TypeNoop, "--id", "j-waited", "--wait")
	if tasks, _ := field(v, "tasks").([]any); len(tasks) != 1 || field(tasks[0], "state") != "succeeded" {
		t.Errorf("submit --wait: %v", v)
	}
	graph := filepath.Join(t.TempDir(), "graph.json")
	if err := os.WriteFile(graph, []byte(`{"tasks":[{"id":"j-g1","type":"demo.noop"},{"id":"j-g2","type":"demo.noop","depends_on":["j-g1"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := ok("submit", "-f", graph, "--wait"); fmt.Sprint(field(v, "ids")) != "[j-g1 j-g2]" {
		t.Errorf("submit -f: %v", v)
	}
	if field(ok("status", "j-one"), "task", "id") != "j-one" {
		t.Error("status: no task")
	}
	ok("status")
	ok("submit", demo.TypeNoop, "--id", "j-later", "--delay", "1h")
	if field(ok("cancel", "j-later"), "state") != "cancelled" {
		t.Error("cancel: not cancelled")
	}
	ok("submit", demo.TypeFail, "--id", "j-fail", "--max-retries", "0", "--wait")
	if _, err := c.Submit(ctx, task.Spec{ID: "j-approve", Type: "j.approval",
		WaitFor: &task.EventWait{Subject: "j.approval", Match: "j-approve", Timeout: task.Duration(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "j-approve waiting for its event", func() bool {
		got, err := c.Get(ctx, "j-approve")
		return err == nil && got.EventWaitSince != nil
	})
	if v := ok("approve", "j-approve", "--reason", "ok"); field(v, "state") != "succeeded" || field(v, "approval", "approved") != true {
		t.Errorf("approve: %v", v)
	}
	ok("submit", demo.TypeFail, "--id", "j-fail2", "--max-retries", "0", "--wait")
	testenv.Eventually(t, 30*time.Second, "two dead letters", func() bool { dls, err := c.DeadLetters(ctx); return err == nil && len(dls) == 2 })
	ok("dlq", "list")
	if field(ok("dlq", "redrive", "j-fail"), "id") != "j-fail" {
		t.Error("dlq redrive: no task")
	}
	if field(ok("redrive", "j-fail2"), "id") != "j-fail2" {
		t.Error("redrive: no task")
	}
	ok("dlq", "rm", "--all", "--dry-run")
	ok("rejected")
	if v := ok("pause", "--type", "j.paused"); field(v, "paused") != true || field(v, "type") != "j.paused" {
		t.Errorf("pause: %v", v)
	}
	if v := ok("resume", "--type", "j.paused"); field(v, "paused") != false {
		t.Errorf("resume: %v", v)
	}
	// A schedule command prints the one schedule, as an object.
	if field(ok("schedule", "create", "j-sched", "--cron", "0 2 * * *", "--type", demo.TypeNoop), "name") != "j-sched" {
		t.Error("schedule create: not the schedule")
	}
	if _, isList := ok("schedule", "list").([]any); !isList {
		t.Error("schedule list: not a list")
	}
	if field(ok("schedule", "pause", "j-sched"), "paused") != true {
		t.Error("schedule pause")
	}
	if field(ok("schedule", "resume", "j-sched"), "name") != "j-sched" {
		t.Error("schedule resume")
	}
	if v := ok("schedule", "delete", "j-sched"); field(v, "deleted") != true {
		t.Errorf("schedule delete: %v", v)
	}
	// A schedule of a whole graph.
	if v := ok("schedule", "create", "j-graph", "--cron", "@hourly", "-f", graph); len(field(v, "graph").([]any)) != 2 {
		t.Errorf("schedule create -f: %v", v)
	}
	ok("limits")
	ok("limits", "set", "j.*", "--concurrency", "2")
	ok("limits", "rm", "j.*")
	ok("workers")
	// Nothing of an earlier layout to move here; --force: AX runs.
	if v := ok("migrate", "tasks", "--force"); field(v, "moved") != float64(0) {
		t.Errorf("ax migrate tasks on a current deployment: %v", v)
	}
	ok("tasks", "ls", "--state", "succeeded", "--limit", "2")
	fails(codeNotFound, "mirror", "lag", "--nats", srv.URL()) // no mirror ever ran
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	if _, err := js.CreateOrUpdateConsumer(ctx, subject.StreamTasks, jetstream.ConsumerConfig{Durable: subject.ConsumerMirror,
		FilterSubject: subject.TaskAll, AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	ok("mirror", "lag")
	ok("poison", "list")
	ok("topology")
	if field(ok("nats-accounts"), "account") == nil {
		t.Error("nats-accounts: no account")
	}

	// Failures: one shape, one code per cause.
	u := srv.URL()
	for _, f := range []struct {
		code string
		args []string
	}{
		{codeNotFound, []string{"status", "no-such-task", "--nats", u}},
		{codeNotFound, []string{"cancel", "no-such-task", "--nats", u}},
		{codeNotFound, []string{"redrive", "no-such-task", "--nats", u}},
		{codeNotFound, []string{"dlq", "redrive", "no-such-task", "--nats", u}},
		{codeNotFound, []string{"schedule", "pause", "no-such-schedule", "--nats", u}},
		{codeNotFound, []string{"schedule", "delete", "no-such-schedule", "--nats", u}},
		{codeNotFound, []string{"poison", "redrive", "999", "--nats", u}},
		{codeNotFound, []string{"dlq", "rm", "no-such-task", "--nats", u}},
		{codeInvalid, []string{"dlq", "rm", "--nats", u}},
		{codeConflict, []string{"cancel", "j-one", "--nats", u}},
		{codeConflict, []string{"redrive", "j-one", "--nats", u}},
		{codeNotFound, []string{"approve", "no-such-task", "--nats", u}},
		{codeConflict, []string{"approve", "j-one", "--reject", "--nats", u}},
		{codeInvalid, []string{"status", "a", "b", "--nats", u}},
		{codeInvalid, []string{"submit", "--nats", u}},
		{codeInvalid, []string{"submit", demo.TypeNoop, "--priority", "high", "--nats", u}},
		{codeInvalid, []string{"submit", demo.TypeNoop, "--priority", "9", "--nats", u}},
		{codeInvalid, []string{"no-such-command", "--nats", u}},
		{codeInvalid, []string{"dlq", "no-such-command", "--nats", u}},
		{codeInvalid, []string{"schedule", "create", "x", "--nats", u}},
		{codeInvalid, []string{"schedule", "create", "x", "--cron", "every now and then", "--type", "t", "--nats", u}},
		{codeInvalid, []string{"limits", "set", "x.*", "--nats", u}},
		{codeInvalid, []string{"pause", "--type", "a..b", "--nats", u}},
		{codeInvalid, []string{"poison", "redrive", "x", "--nats", u}},
		{codeNoTopology, []string{"workers", "--nats", bare.URL()}},
		{codeNoTopology, []string{"status", "x", "--nats", bare.URL()}},
		{codeUnavailable, []string{"status", "x", "--nats", "nats://127.0.0.1:1"}},
	} {
		fails(f.code, f.args...)
	}

	// Every command is covered here or elsewhere.
	for path := range leafCommands() {
		if !covered[path] && jsonElsewhere[path] == "" {
			t.Errorf("ax %s: no -o json case (add one here, or to jsonElsewhere with the test that has it)", path)
		}
	}
}

// leafCommands are the command paths that run something ("submit",
// "dlq list", "bench", …).
func leafCommands() map[string]bool {
	out := map[string]bool{}
	var walk func(c *cobra.Command, prefix string)
	walk = func(c *cobra.Command, prefix string) {
		for _, sub := range c.Commands() {
			path := strings.TrimSpace(prefix + " " + sub.Name())
			if sub.Runnable() {
				out[path] = true
			}
			walk(sub, path)
		}
	}
	root := &cobra.Command{Use: "ax"}
	for _, c := range commands(&globals{}) {
		root.AddCommand(c)
	}
	walk(root, "")
	return out
}

// Each cause has its code, whatever wraps it.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("get x: %w", sdk.ErrNotFound), codeNotFound},
		{&sdk.CommandError{Kind: "cancel", ID: "x", Code: task.ReplyNotFound}, codeNotFound},
		{&sdk.CommandError{Kind: "schedule-pause", ID: "x", Code: task.ReplyNotFound}, codeNotFound},
		{&sdk.CommandError{Kind: "cancel", ID: "x", Code: task.ReplyConflict}, codeConflict},
		{&sdk.CommandError{Kind: "limit-set", ID: "x", Code: task.ReplyInvalid}, codeInvalid},
		{&sdk.RejectedError{Rejection: task.Rejection{ID: "x", Reason: "no"}}, codeRejected},
		{usageError(errors.New("bad flag")), codeInvalid},
		{fmt.Errorf("x: %w", topology.ErrMissing), codeNoTopology},
		{fmt.Errorf("x: %w", nats.ErrNoServers), codeUnavailable},
		{fmt.Errorf("x: %w", nats.ErrPermissionViolation), codePermission},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codeTimeout},
		{fmt.Errorf("x: %w", jetstream.ErrMsgNotFound), codeNotFound},
		{fmt.Errorf("x: %w", jetstream.ErrConsumerNotFound), codeNotFound},
		{errors.New("disk on fire"), codeError},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
