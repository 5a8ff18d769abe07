package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
)

// dlqStack is a server, an orchestrator with fast retries, an executor with
// the demo handlers and an `ax` runner against them.
func dlqStack(t *testing.T) (url string, ax func(wantCode int, args ...string) string) {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	ctx := testenv.Context(t, 2*time.Minute)
	return srv.URL(), func(wantCode int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(ctx, append(args, "--nats", srv.URL()), &out, &errOut); code != wantCode {
			t.Fatalf("ax %v exited %d, want %d: %s%s", args, code, wantCode, errOut.String(), out.String())
		}
		return out.String()
	}
}

// The dead-letter list shows how many attempts a task ran (the last
// attempt's number), not how many failures its record kept (at most 5).
func TestDLQListShowsTheAttemptNumber(t *testing.T) {
	t.Parallel()
	_, ax := dlqStack(t)
	if out := ax(0, "submit", demo.TypeFail, "--id", "dlq-seven", "--max-retries", "6", "--wait"); !strings.Contains(out, "dlq-seven\tfailed") {
		t.Fatalf("submit: %q", out)
	}
	testenv.Eventually(t, 30*time.Second, "the dead letter listed", func() bool { return strings.Contains(ax(0, "dlq", "list"), "dlq-seven") })
	out := ax(0, "dlq", "list")
	if !regexpMatch(`dlq-seven\s+demo.fail\s+\S+\s+7\s+retries exhausted after 7 attempts`, out) {
		t.Errorf("ax dlq list: want 7 attempts:\n%s", out)
	}
	raw := ax(0, "dlq", "list", "-o", "json")
	checkJSONContract(t, "dlq list", raw)
	var dls []struct {
		LastAttempt int               `json:"last_attempt"`
		Attempts    []json.RawMessage `json:"attempts"`
	}
	if err := json.Unmarshal([]byte(raw), &dls); err != nil || len(dls) != 1 || dls[0].LastAttempt != 7 || len(dls[0].Attempts) != 5 {
		t.Errorf("ax dlq list -o json: %s (%v)", raw, err)
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// ax dlq rm discards dead letters — one, a selection, a search — each with
// an audit event naming who and why; the tasks stay failed and can still be
// re-driven. A search can be tried with --dry-run first.
func TestDLQRm(t *testing.T) {
	t.Parallel()
	url, ax := dlqStack(t)
	c := testenv.Client(t, url)
	ctx := testenv.Context(t, time.Minute)
	for _, id := range []string{"rm-one", "rm-two", "rm-three", "rm-keep"} {
		ax(0, "submit", demo.TypeFail, "--id", id, "--max-retries", "0")
	}
	ax(0, "submit", demo.TypeFlaky, "--id", "rm-flaky", "--max-retries", "0", "--payload", `{"fail_times":3}`)
	testenv.Eventually(t, 30*time.Second, "five dead letters", func() bool {
		dls, err := c.DeadLetters(ctx)
		return err == nil && len(dls) == 5
	})
	listed := func() string { return ax(0, "dlq", "list") }

	// One, by id, as a named operator with a reason.
	if out := ax(0, "dlq", "rm", "rm-one", "--reason", "customer closed", "--as", "olga"); !strings.Contains(out, "discarded rm-one") {
		t.Fatalf("dlq rm one: %q", out)
	}
	if strings.Contains(listed(), "rm-one") {
		t.Fatal("rm-one is still in the dead-letter queue")
	}
	evs, err := c.AuditEvents(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || ev.Kind == "dlq" && ev.Key == "rm-one" && ev.To == "discarded" && strings.Contains(ev.Reason, "customer closed") && strings.Contains(ev.Reason, "olga")
	}
	if !found {
		t.Errorf("no audit event of the discard: %+v", evs)
	}
	if got, err := c.Get(ctx, "rm-one"); err != nil || got.State != "failed" {
		t.Fatalf("rm-one after its dead letter went: %+v, %v", got, err)
	}
	// A selection.
	ax(0, "dlq", "rm", "rm-two", "rm-three")
	// A search: a dry run discards nothing, then the real one.
	raw := ax(0, "dlq", "rm", "--type", demo.TypeFlaky, "--error", "simulated failure", "--dry-run", "-o", "json")
	var res dlqRmJSON
	if err := json.Unmarshal([]byte(raw), &res); err != nil || !res.DryRun || len(res.Discarded) != 1 || res.Discarded[0] != "rm-flaky" {
		t.Fatalf("dry run: %s (%v)", raw, err)
	}
	if !strings.Contains(listed(), "rm-flaky") {
		t.Fatal("a dry run discarded")
	}
	ax(0, "dlq", "rm", "--type", demo.TypeFlaky, "--error", "simulated failure")
	out := listed()
	for _, gone := range []string{"rm-two", "rm-three", "rm-flaky"} {
		if strings.Contains(out, gone) {
			t.Errorf("%s still listed:\n%s", gone, out)
		}
	}
	if !strings.Contains(out, "rm-keep") {
		t.Errorf("rm-keep was discarded:\n%s", out)
	}
	// Gone already: not found. Neither ids nor a search: a usage error.
	raw = ax(1, "dlq", "rm", "rm-one", "-o", "json")
	if !strings.Contains(raw, `"code": "not_found"`) {
		t.Errorf("discarding twice: %s", raw)
	}
	if raw = ax(1, "dlq", "rm", "-o", "json"); !strings.Contains(raw, `"code": "invalid"`) {
		t.Errorf("dlq rm without ids: %s", raw)
	}
	// The task can still be re-driven.
	if out := ax(0, "redrive", "rm-one"); !strings.Contains(out, "rm-one\tready") && !strings.Contains(out, "rm-one\t") {
		t.Errorf("redrive after discard: %q", out)
	}
}
