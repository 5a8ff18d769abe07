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

// Schedules are managed in the console: created (a task or a whole
// graph), edited and deleted by an operator after a confirmation page,
// each recorded in the audit trail.
func TestConsoleManagesSchedules(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	ctx := context.Background()
	op := f.login(operatorName, operatorSecret)
	op.mustGet("/schedules", `id="new-schedule"`, `data-edit="nightly"`, `data-delete="nightly"`)
	op.mustGet("/schedules/new", `id="schedule-form"`, `action="/actions/schedule-save"`)

	// Create a graph schedule: confirm, then it exists.
	form := url.Values{"name": {"etl"}, "cron": {"0 3 * * *"}, "time_zone": {"Europe/Berlin"}, "overlap": {"skip"},
		"graph": {`{"tasks":[{"id":"extract","type":"demo.noop"},{"id":"load","type":"demo.noop","depends_on":["extract"]}]}`}}
	code, body := op.act("schedule-save", form, false)
	if code != http.StatusOK || !strings.Contains(body, "Create schedule etl: a graph of 2 tasks each firing of &#34;0 3 * * *&#34; (Europe/Berlin)") {
		t.Fatalf("confirm: %d\n%s", code, excerpt(body))
	}
	if code, body = op.act("schedule-save", form, true); code != http.StatusOK || !strings.Contains(body, "saved; next firing") {
		t.Fatalf("save: %d\n%s", code, excerpt(body))
	}
	sc, err := f.c.Schedule(ctx, "etl")
	if err != nil || len(sc.Graph) != 2 || sc.TimeZone != "Europe/Berlin" {
		t.Fatalf("created schedule: %+v, %v", sc, err)
	}
	waitAudit(t, f, "schedule-save", "schedule=etl")

	// Edit the demo's nightly schedule: its form is filled in; change the cron.
	body = op.mustGet("/schedules/edit?name=nightly", `value="0 2 * * *"`, `value="demo.noop"`, "readonly")
	_ = body
	edit := url.Values{"name": {"nightly"}, "cron": {"30 4 * * *"}, "type": {"demo.noop"}, "priority": {"1"}, "capability": {"default"},
		"max_retries": {"2"}, "timeout": {"1m"}, "overlap": {"allow"}, "payload": {`{"day":"today"}`}}
	if code, body = op.act("schedule-save", edit, true); code != http.StatusOK || !strings.Contains(body, "Replace schedule nightly") {
		t.Fatalf("edit: %d\n%s", code, excerpt(body))
	}
	if sc, err = f.c.Schedule(ctx, "nightly"); err != nil || sc.Cron != "30 4 * * *" || sc.Overlap != "allow" || sc.Template.PriorityLevel() != 1 ||
		sc.Template.RetryLimit() != 2 || string(sc.Template.Payload) != `{"day":"today"}` {
		t.Fatalf("edited schedule: %+v, %v", sc, err)
	}

	// Bad input is refused, naming why; nothing changes.
	for _, bad := range []url.Values{
		{"name": {"x"}, "cron": {"every now and then"}, "type": {"demo.noop"}},
		{"name": {"x"}, "cron": {"@hourly"}, "type": {"demo.noop"}, "graph": {`{"tasks":[{"id":"a","type":"t"}]}`}},
		{"name": {"x"}, "cron": {"@hourly"}, "type": {"demo.noop"}, "payload": {"not json"}},
		{"name": {"bad name"}, "cron": {"@hourly"}, "type": {"demo.noop"}},
	} {
		if code, body = op.act("schedule-save", bad, true); code != http.StatusBadRequest || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("bad schedule %v: %d\n%s", bad, code, excerpt(body))
		}
	}
	if _, err := f.c.Schedule(ctx, "x"); err == nil {
		t.Fatal("a refused schedule was created")
	}

	// Delete: confirm, then gone, audited.
	if code, body = op.act("schedule-delete", url.Values{"name": {"etl"}}, false); code != http.StatusOK || !strings.Contains(body, "Delete schedule etl") {
		t.Fatalf("confirm delete: %d\n%s", code, excerpt(body))
	}
	if code, body = op.act("schedule-delete", url.Values{"name": {"etl"}}, true); code != http.StatusOK || !strings.Contains(body, "deleted") {
		t.Fatalf("delete: %d\n%s", code, excerpt(body))
	}
	if _, err := f.c.Schedule(ctx, "etl"); err == nil {
		t.Fatal("the deleted schedule is still there")
	}
	waitAudit(t, f, "schedule-delete", "schedule=etl")
	// A viewer may look, not change.
	viewer := f.login(viewerName, viewerSecret)
	if code, _ := viewer.act("schedule-delete", url.Values{"name": {"nightly"}}, true); code != http.StatusForbidden {
		t.Fatalf("a viewer deleted a schedule: %d", code)
	}
}
