package console_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// The dead-letter page shows how many attempts a task ran (the last
// attempt's number), not how many failures its record kept (at most 5).
func TestConsoleDLQShowsTheAttemptNumber(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("console.fails", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("always") })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, err := console.New(console.Config{Client: c, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	f := &fixture{t: t, c: c, url: hs.URL}
	id, err := c.Submit(ctx, task.Spec{ID: "seven-attempts", Type: "console.fails", MaxRetries: new(6)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Failed {
		t.Fatalf("%+v, %v", got, err)
	}
	b := f.browser()
	row := regexp.MustCompile(`seven-attempts</a></td><td>console.fails</td>\s*<td>[^<]*</td><td>(\d+)</td>`)
	testenv.Eventually(t, 30*time.Second, "the dead letter listed", func() bool {
		_, body := b.get("/dlq")
		return row.MatchString(body)
	})
	_, body := b.get("/dlq")
	if got := row.FindStringSubmatch(body)[1]; got != "7" {
		t.Fatalf("the dead-letter page shows %s attempts for a task that ran 7", got)
	}
}

// An operator discards dead letters in the console — one, or a group —
// after a confirmation page; they leave the queue, the audit trail names
// the operator, the tasks stay failed. A viewer cannot.
func TestConsoleDiscardDeadLetters(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	shard := task.ShardID(f.sharded, 3)
	viewer := f.login(viewerName, viewerSecret)
	if code, _ := viewer.act("dlq-discard", url.Values{"id": {f.failing}}, true); code != http.StatusForbidden {
		t.Fatalf("a viewer discarded: %d", code)
	}
	op := f.login(operatorName, operatorSecret)
	op.mustGet("/dlq", `action="/actions/dlq-discard"`, `id="discard-selected"`, `data-discard-group="`+typeToggle+`"`)
	code, body := op.act("dlq-discard", url.Values{"id": {f.failing}, "reason": {"order refunded"}, "back": {"/dlq"}}, false)
	if code != http.StatusOK || !strings.Contains(body, "Discard the dead letter of task "+f.failing) || !strings.Contains(body, "stay failed") {
		t.Fatalf("confirm page: %d\n%s", code, excerpt(body))
	}
	if code, body = op.act("dlq-discard", url.Values{"id": {f.failing}, "reason": {"order refunded"}}, true); code != http.StatusOK || !strings.Contains(body, "dead letter discarded") {
		t.Fatalf("discard: %d\n%s", code, excerpt(body))
	}
	waitAudit(t, f, "dlq-discard", f.failing)
	if body := op.mustGet("/dlq"); strings.Contains(body, ">"+f.failing+"<") {
		t.Fatalf("the discarded dead letter is still listed:\n%s", excerpt(body))
	}
	if st := f.state(f.failing); st != task.Failed {
		t.Fatalf("discarded task is %s", st)
	}
	// A group: the shard's dead letter.
	dls, err := f.c.DeadLetters(context.Background())
	if err != nil || len(dls) != 1 || dls[0].Spec.ID != shard {
		t.Fatalf("dead letters left: %+v, %v", dls, err)
	}
	group := dlqGroupKey(t, op)
	if code, body = op.act("dlq-discard", url.Values{"group": {group}}, true); code != http.StatusOK || !strings.Contains(body, "dead letter discarded") {
		t.Fatalf("discard the group: %d\n%s", code, excerpt(body))
	}
	op.mustGet("/dlq", `id="nodlq"`)
	// Nothing left to discard: refused, nothing changed.
	if code, body = op.act("dlq-discard", url.Values{"group": {group}}, true); code != http.StatusBadRequest || !strings.Contains(body, "empty now") {
		t.Fatalf("discarding an empty group: %d\n%s", code, excerpt(body))
	}
}

// dlqGroupKey is the key of the first group on the dead-letter page.
func dlqGroupKey(t *testing.T, b *browser) string {
	t.Helper()
	m := regexp.MustCompile(`name="group" value="([^"]+)"`).FindStringSubmatch(b.mustGet("/dlq"))
	if m == nil {
		t.Fatal("no dead-letter group on /dlq")
	}
	return html.UnescapeString(m[1])
}
