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
