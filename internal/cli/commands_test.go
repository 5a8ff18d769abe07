package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// goFieldName matches a JSON key spelled like an exported Go field
// ("Revision", "ExecutionID"): a key the -o json contract forbids. Data
// used as map keys (stream names such as AX_DLQ, task states, ULIDs) does
// not look like that.
var goFieldName = regexp.MustCompile(`^[A-Z][a-z]|[a-z][A-Z]`)

// checkJSONContract decodes out and fails on a key that is not snake_case
// or a null (the commands print empty lists as [] and leave out absent
// objects).
func checkJSONContract(t *testing.T, cmd string, out string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("ax %s -o json printed no JSON (%v):\n%s", cmd, err, out)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case nil:
			t.Errorf("ax %s -o json: %s is null:\n%s", cmd, path, out)
		case map[string]any:
			for k, e := range v {
				if goFieldName.MatchString(k) {
					t.Errorf("ax %s -o json: key %q at %s is not snake_case", cmd, k, path)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(path+"["+string(rune('0'+i%10))+"]", e)
			}
		}
	}
	walk("$", v)
	return v
}

// TestCommandsAgainstAStack runs every client subcommand against an
// embedded server, orchestrator and executor, in table and JSON output.
func TestCommandsAgainstAStack(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)

	ax := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(ctx, append(args, "--nats", srv.URL()), &out, &errOut); code != wantCode {
			t.Fatalf("ax %v exited %d, want %d: %s%s", args, code, wantCode, errOut.String(), out.String())
		}
		return out.String()
	}
	axJSON := func(args ...string) any {
		t.Helper()
		return checkJSONContract(t, strings.Join(args, " "), ax(0, append(args, "-o", "json")...))
	}

	// Empty lists are [] before anything exists.
	for _, args := range [][]string{{"dlq", "list"}, {"rejected"}, {"schedule", "list"}} {
		if out := strings.TrimSpace(ax(0, append(args, "-o", "json")...)); out != "[]" {
			t.Errorf("ax %v -o json on an empty system printed %s, want []", args, out)
		}
	}

	// submit by flags, --wait, and from a file; status by id.
	if out := ax(0, "submit", demo.TypeNoop, "--id", "cli-ok", "--priority", "0", "--max-retries", "0", "--wait"); !strings.Contains(out, "cli-ok\tsucceeded") {
		t.Fatalf("submit --wait: %q", out)
	}
	got, err := c.Get(ctx, "cli-ok")
	if err != nil || got.PriorityLevel() != 0 || got.RetryLimit() != 0 {
		t.Fatalf("flags --priority 0 --max-retries 0 gave %+v, %v", got, err)
	}
	file := filepath.Join(t.TempDir(), "graph.json")
	graph := `{"tasks":[{"id":"cli-g1","type":"demo.noop"},{"id":"cli-g2","type":"demo.noop","depends_on":["cli-g1"]}]}`
	if err := os.WriteFile(file, []byte(graph), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := ax(0, "submit", "-f", file, "--wait"); !strings.Contains(out, "cli-g2\tsucceeded") {
		t.Fatalf("submit -f --wait: %q", out)
	}
	if g2, err := c.Get(ctx, "cli-g2"); err != nil || g2.PriorityLevel() != task.DefaultPriority || g2.RetryLimit() != task.DefaultMaxRetries {
		t.Fatalf("a spec without priority and max_retries: %+v, %v", g2, err)
	}
	if out := ax(0, "status", "cli-ok"); !strings.Contains(out, "Priority    p0") || !strings.Contains(out, "History:") {
		t.Errorf("status table:\n%s", out)
	}
	st := axJSON("status", "cli-ok").(map[string]any)
	history, _ := st["history"].([]any)
	if len(history) < 2 { // ready, then succeeded (a short attempt is never marked running)
		t.Fatalf("status -o json history %v", st["history"])
	}
	first := history[0].(map[string]any)
	if _, ok := first["revision"]; !ok || first["event"] == nil {
		t.Errorf("history entry keys: %v", first)
	}
	if _, ok := st["shards"]; ok {
		t.Errorf("a task that is not sharded has shards in its status: %v", st["shards"])
	}

	// A missing task: a JSON error object and a non-zero exit.
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	out := ax(1, "status", "no-such-task", "-o", "json")
	checkJSONContract(t, "status no-such-task", out)
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.Error.Code != "not_found" || !strings.Contains(e.Error.Message, "no-such-task") {
		t.Errorf("missing task printed %q (%v)", out, err)
	}
	ax(1, "status", "no-such-task")
	ax(1, "cancel", "no-such-task", "-o", "json")

	// cancel a delayed task.
	if _, err := c.Submit(ctx, task.Spec{ID: "cli-later", Type: demo.TypeNoop, Delay: task.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "cli-later accepted", func() bool { _, err := c.Get(ctx, "cli-later"); return err == nil })
	if out := ax(0, "cancel", "cli-later", "--reason", "not needed"); !strings.Contains(out, "cli-later\tcancelled") {
		t.Errorf("cancel: %q", out)
	}
	if ct := axJSON("status", "cli-later").(map[string]any)["task"].(map[string]any); ct["state"] != "cancelled" || ct["reason"] == "" {
		t.Errorf("cancelled task: %v", ct)
	}

	// dlq list and redrive: a task that fails permanently.
	if out := ax(0, "submit", demo.TypeFail, "--id", "cli-fail", "--max-retries", "0", "--wait"); !strings.Contains(out, "cli-fail\tfailed") {
		t.Fatalf("submit failing task: %q", out)
	}
	testenv.Eventually(t, 10*time.Second, "dead letter listed", func() bool {
		return strings.Contains(ax(0, "dlq", "list"), "cli-fail")
	})
	dls := axJSON("dlq", "list").([]any)
	if len(dls) != 1 || dls[0].(map[string]any)["spec"].(map[string]any)["id"] != "cli-fail" {
		t.Errorf("dlq list -o json: %v", dls)
	}
	if out := ax(0, "dlq", "redrive", "cli-fail"); !strings.Contains(out, "cli-fail\t") {
		t.Errorf("dlq redrive: %q", out)
	}
	ax(1, "dlq", "redrive", "no-such-task")

	// rejected: an invalid spec from a file is refused by the orchestrator.
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"id":"cli-bad","type":"demo.noop","timeout":"soon"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out = ax(1, "submit", "-f", bad, "-o", "json")
	if err := json.Unmarshal([]byte(out), &e); err != nil || !strings.Contains(e.Error.Message, `field "timeout"`) {
		t.Errorf("bad duration: %q", out)
	}

	// schedules: create, list, pause, resume, delete.
	ax(0, "schedule", "create", "cli-nightly", "--cron", "0 2 * * *", "--type", demo.TypeNoop, "--priority", "0")
	ss := axJSON("schedule", "list").([]any)
	if len(ss) != 1 || ss[0].(map[string]any)["name"] != "cli-nightly" {
		t.Fatalf("schedule list: %v", ss)
	}
	if tmpl := ss[0].(map[string]any)["template"].(map[string]any); tmpl["priority"] != 0.0 || tmpl["max_retries"] != 5.0 {
		t.Errorf("schedule template: %v", tmpl)
	}
	if out := ax(0, "schedule", "list"); !strings.Contains(out, "cli-nightly") {
		t.Errorf("schedule list table: %s", out)
	}
	if p := axJSON("schedule", "pause", "cli-nightly").(map[string]any); p["paused"] != true {
		t.Errorf("schedule pause: %v", p)
	}
	if r := axJSON("schedule", "resume", "cli-nightly").(map[string]any); r["paused"] == true {
		t.Errorf("schedule resume: %v", r)
	}
	if out := ax(0, "schedule", "delete", "cli-nightly"); !strings.Contains(out, "cli-nightly deleted") {
		t.Errorf("schedule delete: %q", out)
	}
	if out := strings.TrimSpace(ax(0, "schedule", "list", "-o", "json")); out != "[]" {
		t.Errorf("schedule list after delete: %s", out)
	}

	// pause and resume a type; the overview shows it.
	ax(0, "pause", "--type", demo.TypeSleep, "--reason", "maintenance")
	ov := axJSON("status").(map[string]any)
	if pauses := ov["gates"].(map[string]any)["pauses"].(map[string]any); pauses[demo.TypeSleep] == nil {
		t.Errorf("overview after pause: %v", ov["gates"])
	}
	if out := ax(0, "status"); !strings.Contains(out, demo.TypeSleep) {
		t.Errorf("overview table lacks the pause:\n%s", out)
	}
	ax(0, "resume", "--type", demo.TypeSleep)
	testenv.Eventually(t, 10*time.Second, "pause lifted", func() bool {
		g, err := c.Gates(ctx)
		return err == nil && len(g.Pauses) == 0
	})

	// topology lists every stream.
	if out := ax(0, "topology"); !strings.Contains(out, "AX_TASKS") || !strings.Contains(out, "replicas 1") {
		t.Errorf("topology: %s", out)
	}
}

// TestLongRunningCommandsStartAndStop: ax server, ax orchestrator and ax
// worker run until their context ends, then exit 0; together they run a task.
func TestLongRunningCommandsStartAndStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code     int
		out, err string
	}
	start := func(args ...string) (<-chan result, *syncBuffer) {
		done := make(chan result, 1)
		var out, errOut syncBuffer
		go func() {
			code := Run(ctx, args, &out, &errOut)
			done <- result{code, out.String(), errOut.String()}
		}()
		return done, &out
	}
	serverDone, serverOut := start("server", "--store", t.TempDir(), "--port", "0", "--log-level", "warn")
	var url string
	testenv.Eventually(t, 20*time.Second, "ax server prints its URL", func() bool {
		url = strings.TrimSpace(serverOut.String())
		return strings.HasPrefix(url, "nats://")
	})
	orchDone, _ := start("orchestrator", "--nats", url, "--log-level", "warn")
	workerDone, _ := start("worker", "--nats", url, "--log-level", "warn")
	wctx := testenv.Context(t, time.Minute)
	var c *sdk.Client
	testenv.Eventually(t, 30*time.Second, "the orchestrator created the streams", func() bool {
		var err error
		c, err = sdk.Connect(wctx, url)
		return err == nil
	})
	defer c.Close()
	if _, err := c.Submit(wctx, task.Spec{ID: "long-running", Type: demo.TypeNoop}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(wctx, "long-running"); err != nil || got.State != task.Succeeded {
		t.Fatalf("task through ax orchestrator and ax worker: %+v, %v", got, err)
	}
	cancel()
	for name, done := range map[string]<-chan result{"worker": workerDone, "orchestrator": orchDone} {
		if r := <-done; r.code != 0 {
			t.Errorf("ax %s exited %d: %s", name, r.code, r.err)
		}
	}
	if r := <-serverDone; r.code != 0 {
		t.Errorf("ax server exited %d: %s", r.code, r.err)
	}
}

// TestEmptyNotNull: nil lists and maps at any depth print as [] and {};
// values that marshal themselves are untouched.
func TestEmptyNotNull(t *testing.T) {
	type inner struct {
		IDs  []string          `json:"ids"`
		Raw  json.RawMessage   `json:"raw,omitempty"`
		At   time.Time         `json:"at"`
		Tags map[string]string `json:"tags"`
		skip []int
	}
	type outer struct {
		In    *inner  `json:"in"`
		Items []inner `json:"items"`
		Any   any     `json:"any"`
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v := outer{In: &inner{At: at}, Items: []inner{{}}, Any: []int(nil)}
	b, err := json.Marshal(emptyNotNull(v))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"in":{"ids":[],"at":"2026-11-30T12:00:00Z","tags":{}},"items":[{"ids":[],"at":"0001-01-01T00:00:00Z","tags":{}}],"any":[]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if v.In.IDs != nil || v.Items[0].IDs != nil {
		t.Fatal("emptyNotNull changed its argument")
	}
	if b, _ := json.Marshal(emptyNotNull(inner{Raw: json.RawMessage(`{"a":1}`)})); !strings.Contains(string(b), `"raw":{"a":1}`) {
		t.Fatalf("raw message: %s", b)
	}
}

// TestHelpAndCompletion runs cobra's own subcommands: help for a command,
// and the completion script of every shell.
func TestHelpAndCompletion(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	if code, out, errOut := runCLI(ctx, "help", "submit"); code != 0 || !strings.Contains(out, "Usage:") || !strings.Contains(out, "ax submit") {
		t.Errorf("ax help submit: exit %d: %s%s", code, out, errOut)
	}
	for shell, want := range map[string]string{"bash": "bash completion", "zsh": "#compdef ax", "fish": "complete -c ax", "powershell": "Register-ArgumentCompleter"} {
		if code, out, errOut := runCLI(ctx, "completion", shell); code != 0 || !strings.Contains(out, want) {
			t.Errorf("ax completion %s: exit %d, lacks %q: %.200s%s", shell, code, want, out, errOut)
		}
	}
}
