package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// typeToggle fails (permanently) while broken is set: a dead letter that a
// re-drive fixes once the "outage" is over.
const (
	typeToggle = "console.toggle"
	typeSplit  = "console.split"
)

const (
	operatorName   = "alice"
	operatorSecret = "alice-secret-1"
	viewerName     = "victor"
	viewerSecret   = "victor-secret-1"
)

// fixture is AX (orchestrator, executor, optionally the MySQL mirror) with
// a small workload, and a console serving it.
type fixture struct {
	t      *testing.T
	c      *sdk.Client
	js     jetstream.JetStream
	url    string
	broken *atomic.Bool
	// Tasks of the workload.
	upstream, downstream, failing, flaky, delayed, sharded string
	// A DAG around failing: labelled (a result) and failing feed gather
	// (all_ended, reads its inputs); cancelled depends on failing; dup
	// was submitted with holder's unique key.
	labelled, gather, cancelled, holder, dup string
}

func setup(t *testing.T, withMySQL bool) *fixture {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	demo.Register(ex)
	broken := &atomic.Bool{}
	broken.Store(true)
	ex.HandleFunc(typeToggle, func(_ context.Context, j *executor.Job) (any, error) {
		if broken.Load() {
			return nil, executor.Permanent(fmt.Errorf("payment gateway down: order %s", j.ID))
		}
		return map[string]string{"ok": j.ID}, nil
	})
	ex.HandleShards(typeSplit, executor.Sharded{
		Plan: func(context.Context, *executor.Job) ([]executor.Shard, error) { return make([]executor.Shard, 4), nil },
		Shard: func(_ context.Context, j *executor.Job) (any, error) {
			if j.ShardIndex == 3 {
				return nil, executor.Permanent(errors.New("shard 3 broken"))
			}
			return j.ShardIndex, nil
		},
	})
	testenv.Start(t, ex)
	nc := testenv.Conn(t, srv.URL())
	c := testenv.Client(t, srv.URL())
	js, _ := jetstream.New(nc)
	ctx := testenv.Context(t, 3*time.Minute)

	cfg := console.Config{Client: c, Credentials: []console.Credential{
		{Name: operatorName, Role: console.RoleOperator, Secret: operatorSecret},
		{Name: viewerName, Role: console.RoleViewer, Secret: viewerSecret},
	}, Logger: testenv.Logger(t)}
	var mirrored func(id, state string) bool
	if withMySQL {
		_, sqlDB := mirrortest.DB(t)
		m, err := mirror.New(testenv.Conn(t, srv.URL()), sqlDB, mirror.Config{FetchWait: 100 * time.Millisecond, Logger: testenv.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		cfg.Auditor = audit.New(sqlDB, nil)
		cfg.MirrorInfo = "test"
		mirrored = func(id, state string) bool {
			var got string
			err := sqlDB.QueryRowContext(ctx, "SELECT state FROM ax_tasks WHERE id = ?", id).Scan(&got)
			return err == nil && got == state
		}
	}
	s, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	f := &fixture{t: t, c: c, js: js, url: hs.URL, broken: broken}
	f.upstream, f.downstream = "up-"+task.NewID(), "down-"+task.NewID()
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		{ID: f.upstream, Type: demo.TypeNoop, Priority: new(1)},
		{ID: f.downstream, Type: demo.TypeNoop, Priority: new(1), DependsOn: []string{f.upstream}},
	}); err != nil {
		t.Fatal(err)
	}
	submit := func(s task.Spec) string {
		t.Helper()
		id, err := c.Submit(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	f.failing = submit(task.Spec{ID: "fail-" + task.NewID(), Type: typeToggle, Priority: new(1), MaxRetries: new(0)})
	f.flaky = submit(task.Spec{Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":2}`), Priority: new(2), MaxRetries: new(3)})
	f.delayed = submit(task.Spec{Type: demo.TypeNoop, Priority: new(3), Delay: task.Duration(3 * time.Hour)})
	f.sharded = submit(task.Spec{Type: typeSplit, Priority: new(1), Shardable: true, MinShardSuccess: 0.5})
	f.labelled = submit(task.Spec{Type: demo.TypeSleep, Payload: json.RawMessage(`{"label":"report-src"}`), Priority: new(1)})
	f.gather, f.cancelled = "gather-"+task.NewID(), "cancelled-"+task.NewID()
	if _, err := c.SubmitGraph(ctx, []task.Spec{
		{ID: f.gather, Type: demo.TypeGather, Priority: new(1), DependsOn: []string{f.labelled, f.failing}, TriggerRule: task.TriggerAllEnded},
		{ID: f.cancelled, Type: demo.TypeNoop, Priority: new(1), DependsOn: []string{f.failing}},
	}); err != nil {
		t.Fatal(err)
	}
	unique := task.Spec{Type: demo.TypeNoop, Priority: new(1), UniqueKey: "nightly-export/acme", UniqueWindow: task.Duration(time.Hour)}
	f.holder = submit(unique)
	testenv.Eventually(t, time.Minute, "the unique key's holder to be accepted", func() bool {
		_, err := c.Get(ctx, f.holder)
		return err == nil
	})
	f.dup = submit(unique)
	// A rejected submission (priority out of range).
	if _, err := js.Publish(ctx, "task.submit.console.bad", []byte(`{"id":"bad-input-1","priority":99}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSchedule(ctx, task.Schedule{Name: "nightly", Cron: "0 2 * * *", Template: task.Spec{Type: demo.TypeNoop, Priority: new(2), Capability: "default", MaxRetries: new(1)}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]task.State{f.upstream: task.Succeeded, f.downstream: task.Succeeded, f.failing: task.Failed,
		f.flaky: task.Succeeded, f.delayed: task.Waiting, f.sharded: task.Succeeded,
		f.labelled: task.Succeeded, f.gather: task.Succeeded, f.cancelled: task.Cancelled, f.holder: task.Succeeded, f.dup: task.Cancelled}
	testenv.Eventually(t, 2*time.Minute, "the workload to settle", func() bool {
		for id, st := range want {
			got, err := c.Get(ctx, id)
			if err != nil || got.State != st {
				return false
			}
			if mirrored != nil && !mirrored(id, string(st)) {
				return false
			}
		}
		if _, err := c.Get(ctx, "bad-input-1"); !isRejected(err) {
			return false
		}
		// A dead letter is stored after its task's record says failed:
		// wait for both (the toggle task and shard 3).
		dlq, err := js.Stream(ctx, subject.StreamDLQ)
		return err == nil && dlq.CachedInfo().State.Msgs == 2
	})
	return f
}

func isRejected(err error) bool {
	var rej *sdk.RejectedError
	return errors.As(err, &rej)
}

// browser is an HTTP client with its own cookies, like one browser.
type browser struct {
	f  *fixture
	hc *http.Client
}

func (f *fixture) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{f: f, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) get(path string) (int, string) {
	b.f.t.Helper()
	resp, err := b.hc.Get(b.f.url + path)
	if err != nil {
		b.f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// mustGet fetches a page that must answer 200 and contain every want.
func (b *browser) mustGet(path string, want ...string) string {
	b.f.t.Helper()
	code, body := b.get(path)
	if code != http.StatusOK {
		b.f.t.Fatalf("GET %s: %d\n%s", path, code, excerpt(body))
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			b.f.t.Fatalf("GET %s lacks %q\n%s", path, w, excerpt(body))
		}
	}
	return body
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the form token of this browser (from a page it loads).
func (b *browser) csrf() string {
	b.f.t.Helper()
	_, body := b.get("/login")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		b.f.t.Fatalf("no csrf token on /login")
	}
	return m[1]
}

func (b *browser) post(path string, form url.Values, header ...string) (int, string) {
	b.f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.f.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		b.f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// act posts an action with this browser's token, confirmed or not.
func (b *browser) act(action string, form url.Values, confirm bool) (int, string) {
	b.f.t.Helper()
	form.Set("csrf", b.csrf())
	if confirm {
		form.Set("confirm", "yes")
	}
	return b.post("/actions/"+action, form)
}

func (f *fixture) login(name, secret string) *browser {
	f.t.Helper()
	b := f.browser()
	code, body := b.post("/login", url.Values{"csrf": {b.csrf()}, "name": {name}, "secret": {secret}, "next": {"/tasks"}})
	if code != http.StatusSeeOther {
		f.t.Fatalf("login %s: %d\n%s", name, code, excerpt(body))
	}
	return b
}

func excerpt(s string) string {
	if i := strings.Index(s, "<main>"); i >= 0 {
		s = s[i:]
	}
	if len(s) > 3000 {
		s = s[:3000]
	}
	return s
}

// state reads a task's state from JetStream.
func (f *fixture) state(id string) task.State {
	f.t.Helper()
	t, err := f.c.Get(context.Background(), id)
	if err != nil {
		f.t.Fatalf("get %s: %v", id, err)
	}
	return t.State
}

func TestConsolePagesWithMySQL(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	b := f.browser()

	t.Run("overview", func(t *testing.T) {
		b.mustGet("/", "Overview", `id="count-succeeded"`, `id="count-failed"`, "Executors online", "Ready backlog", "mirror lag", "read-only")
		b.mustGet("/?part=live", `id="count-waiting"`)
		body := b.mustGet("/api/overview")
		var ov console.Overview
		if err := json.Unmarshal([]byte(body), &ov); err != nil {
			t.Fatal(err)
		}
		if ov.Source != "mysql" || ov.States["failed"] < 1 || ov.States["succeeded"] < 4 || ov.MirrorLag == nil || ov.Queues["AX_DLQ"] != 2 {
			t.Fatalf("overview %+v", ov)
		}
		if len(ov.Series.Types) == 0 || len(ov.Executor) != 1 || ov.Executor[0].Capabilities[0] != "default" {
			t.Fatalf("charts %v, executors %+v", ov.Series.Types, ov.Executor)
		}
	})

	t.Run("search", func(t *testing.T) {
		b.mustGet("/tasks", "the MySQL mirror", f.failing, f.upstream)
		body := b.mustGet("/tasks?state=failed", f.failing, "payment gateway down", "Re-drive all matching")
		if strings.Contains(body, f.upstream) {
			t.Fatal("state filter: succeeded task listed among failed ones")
		}
		b.mustGet("/tasks?id="+f.failing, f.failing)
		b.mustGet("/tasks?prefix=fail-", f.failing)
		b.mustGet("/tasks?type="+typeToggle+"&capability=default&priority=1", f.failing)
		b.mustGet("/tasks?error=gateway+down", f.failing)
		body = b.mustGet("/tasks?error=no+such+error+text", `id="noresults"`)
		if strings.Contains(body, f.failing) {
			t.Fatal("error filter matched")
		}
		from := time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15:04")
		b.mustGet("/tasks?from="+from+"&sort=id&order=asc", f.failing)
		body = b.mustGet("/tasks?limit=1&sort=id", `id="next"`)
		b.mustGet("/tasks?limit=1&sort=id&page=2", `id="prev"`)
		b.mustGet("/tasks?state=failed&type="+typeToggle, `href="/tasks?state=failed&amp;type=`+typeToggle+`" id="self"`)
		_ = body
	})

	t.Run("task", func(t *testing.T) {
		b.mustGet("/task/"+f.flaky, "It ran 3 times", "simulated failure 1 of 2", `id="attempts"`, `id="timeline"`, "succeeded_on_attempt")
		b.mustGet("/task/"+f.downstream, `id="dag-data"`, f.upstream, "upstream")
		b.mustGet("/task/"+f.upstream, "dependent", f.downstream)
		b.mustGet("/task/"+f.failing, "dead-letter queue", "payment gateway down", `id="redrive"`)
		b.mustGet("/task/"+f.delayed, "Delayed until", `id="cancel"`)
		b.mustGet("/task/"+f.sharded, `id="shards"`, "4 planned", "shard 3 broken", task.ShardID(f.sharded, 3))
		b.mustGet("/task/"+task.ShardID(f.sharded, 3), "Shard of", f.sharded)
		b.mustGet("/task/bad-input-1", "Rejected submission", "priority")
	})

	t.Run("task of a DAG", func(t *testing.T) {
		// The inputs its handler read: the labelled upstream's result,
		// the failing one's reason; the result of demo.gather shows both.
		body := b.mustGet("/task/"+f.gather, `id="trigger-rule"`, "all_ended", `id="inputs"`, f.labelled, f.failing,
			`{&#34;executor_attempt&#34;:1,&#34;label&#34;:&#34;report-src&#34;`, "payment gateway down", `&#34;state&#34;: &#34;failed&#34;`)
		if strings.Contains(body, `id="cancelled-by"`) || strings.Contains(body, `id="duplicate-of"`) {
			t.Fatalf("gather shows a cancellation or a duplicate:\n%s", excerpt(body))
		}
		b.mustGet("/task/"+f.cancelled, `id="cancelled-by"`, `href="/task/`+f.failing+`"`, "all_succeeded",
			"ax redrive "+f.failing+" --with-dependents", `id="inputs"`)
		b.mustGet("/task/"+f.dup, `id="duplicate-of"`, `href="/task/`+f.holder+`"`, "never ran", `id="unique-key"`, "nightly-export/acme", "1h0m0s")
		body = b.mustGet("/task/"+f.holder, `id="unique-key"`, "nightly-export/acme")
		if strings.Contains(body, `id="duplicate-of"`) || strings.Contains(body, `id="inputs"`) || strings.Contains(body, `id="trigger-rule"`) {
			t.Fatalf("the holder shows a duplicate, inputs or a trigger rule:\n%s", excerpt(body))
		}
	})

	t.Run("dlq, rejected, schedules", func(t *testing.T) {
		b.mustGet("/dlq", `id="groups"`, typeToggle, "payment gateway down: order fail-&lt;id&gt;", f.failing)
		b.mustGet("/dlq?type="+typeToggle, f.failing)
		b.mustGet("/rejected", "bad-input-1", "task.submit.console.bad")
		b.mustGet("/schedules", "nightly", "0 2 * * *", "Run now")
		b.mustGet("/static/app.js", "dagre")
		b.mustGet("/static/vendor/dagre.min.js")
		b.mustGet("/static/vendor/uPlot.iife.min.js")
	})
}

func TestConsoleBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	b := f.browser()
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/task/no-such-task", http.StatusNotFound, "No task has the id"},
		{"/task/bad.id", http.StatusBadRequest, "not a valid task id"},
		{"/tasks?priority=9", http.StatusBadRequest, "priority"},
		{"/tasks?state=sleeping", http.StatusBadRequest, "state"},
		{"/tasks?from=yesterday", http.StatusBadRequest, "is not a time"},
		{"/tasks?from=2026-01-02&to=2026-01-01", http.StatusBadRequest, "from must be before to"},
		{"/tasks?sort=size", http.StatusBadRequest, "sort"},
		{"/tasks?order=up", http.StatusBadRequest, "order"},
		{"/tasks?page=0", http.StatusBadRequest, "page"},
		{"/tasks?page=999999", http.StatusBadRequest, "too deep"},
		{"/tasks?limit=100000", http.StatusBadRequest, "limit"},
		{"/tasks?type=a..b", http.StatusBadRequest, "type"},
		{"/tasks?id=a.b", http.StatusBadRequest, "id"},
		{"/dlq?type=a..b", http.StatusBadRequest, "type"},
		{"/?part=secret", http.StatusBadRequest, "no part"},
		{"/nowhere", http.StatusNotFound, "Page not found"},
	} {
		code, body := b.get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) || !strings.Contains(body, `id="error"`) {
			t.Errorf("GET %s: %d (want %d with %q)\n%s", tc.path, code, tc.code, tc.want, excerpt(body))
		}
	}

	redrive := url.Values{"id": {f.failing}, "confirm": {"yes"}}
	unchanged := func(what string) {
		t.Helper()
		if st := f.state(f.failing); st != task.Failed {
			t.Fatalf("%s changed the task: %s", what, st)
		}
	}
	// Forged posts: no token, a wrong token, another browser's token, a
	// cross-site origin.
	op := f.login(operatorName, operatorSecret)
	other := f.browser()
	for _, tc := range []struct {
		name   string
		csrf   string
		header []string
	}{
		{"no token", "", nil},
		{"wrong token", "forged", nil},
		{"another browser's token", other.csrf(), nil},
		{"cross-site origin", op.csrf(), []string{"Origin", "https://evil.example"}},
		{"cross-site fetch", op.csrf(), []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		form := url.Values{"id": {f.failing}, "confirm": {"yes"}}
		if tc.csrf != "" {
			form.Set("csrf", tc.csrf)
		}
		code, body := op.post("/actions/redrive", form, tc.header...)
		if code != http.StatusForbidden || !strings.Contains(body, "Form refused") || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("%s: %d\n%s", tc.name, code, excerpt(body))
		}
		unchanged(tc.name)
	}
	// No credential: anonymous, a viewer, a wrong password, basic auth of a viewer.
	code, body := f.browser().act("redrive", redrive, true)
	if code != http.StatusForbidden || !strings.Contains(body, "Read-only") {
		t.Fatalf("anonymous redrive: %d\n%s", code, excerpt(body))
	}
	viewer := f.login(viewerName, viewerSecret)
	viewer.mustGet("/", viewerName+" · viewer")
	if code, body = viewer.act("redrive", url.Values{"id": {f.failing}}, true); code != http.StatusForbidden || !strings.Contains(body, "Read-only") {
		t.Fatalf("viewer redrive: %d\n%s", code, excerpt(body))
	}
	bad := f.browser()
	if code, body = bad.post("/login", url.Values{"csrf": {bad.csrf()}, "name": {operatorName}, "secret": {"guess-guess"}}); code != http.StatusUnauthorized || !strings.Contains(body, "Wrong name or secret") {
		t.Fatalf("wrong password: %d", code)
	}
	basic := f.browser()
	tok := basic.csrf()
	req, _ := http.NewRequest(http.MethodPost, f.url+"/actions/redrive", strings.NewReader(url.Values{"id": {f.failing}, "confirm": {"yes"}, "csrf": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(viewerName, viewerSecret)
	resp, err := basic.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer by basic auth: %d", resp.StatusCode)
	}
	unchanged("read-only users")

	// An operator's malformed actions.
	for _, tc := range []struct {
		action string
		form   url.Values
		want   string
	}{
		{"redrive", url.Values{"id": {"bad.id"}}, "not a valid task id"},
		{"redrive", url.Values{}, "no task was selected"},
		{"redrive", url.Values{"id": {f.failing}, "canary": {"zero"}}, "canary"},
		{"redrive", url.Values{"search": {"state=failed&priority=77"}}, "bad search"},
		{"redrive", url.Values{"group": {"no|such group"}}, "group is empty"},
		{"cancel", url.Values{"id": {"no-such-task"}}, "not found"},
		{"pause", url.Values{"type": {"a..b"}}, "not a valid task type"},
		{"schedule-pause", url.Values{"name": {"no-such-schedule"}}, "no schedule"},
		{"explode", url.Values{"id": {f.failing}}, "no action"},
	} {
		code, body := op.act(tc.action, tc.form, true)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("%s %v: %d (want 400 with %q)\n%s", tc.action, tc.form, code, tc.want, excerpt(body))
		}
	}
	// A command the orchestrator refuses: re-driving a task that did not fail.
	if code, body = op.act("redrive", url.Values{"id": {f.upstream}}, true); code != http.StatusConflict || !strings.Contains(body, "only failed tasks can be re-driven") {
		t.Fatalf("redrive of a succeeded task: %d\n%s", code, excerpt(body))
	}
	unchanged("malformed actions")
	if st := f.state(f.upstream); st != task.Succeeded {
		t.Fatalf("upstream is %s", st)
	}
	// Without confirmation nothing happens: a confirmation page.
	if code, body = op.act("redrive", url.Values{"id": {f.failing}}, false); code != http.StatusOK || !strings.Contains(body, `id="confirm"`) {
		t.Fatalf("unconfirmed: %d\n%s", code, excerpt(body))
	}
	unchanged("an unconfirmed action")
}

func TestConsoleActions(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	ctx := testenv.Context(t, 3*time.Minute)
	op := f.login(operatorName, operatorSecret)
	op.mustGet("/", operatorName+" · operator")

	// Re-drive the dead letter once its cause is fixed: it succeeds, and
	// its history and the audit trail name the operator.
	f.broken.Store(false)
	// With its dependents: the task its failure cancelled is re-opened
	// under its id and runs.
	code, body := op.act("redrive", url.Values{"id": {f.failing}, "reason": {"gateway is back"}, "back": {"/task/" + f.failing}}, false)
	if code != http.StatusOK || !strings.Contains(body, "Re-drive task "+f.failing) || !strings.Contains(body, `id="with-dependents"`) {
		t.Fatalf("confirm page: %d\n%s", code, excerpt(body))
	}
	code, body = op.act("redrive", url.Values{"id": {f.failing}, "reason": {"gateway is back"}, "with_dependents": {"yes"}}, true)
	if code != http.StatusOK || !strings.Contains(body, "now ready") || !strings.Contains(body, "re-opened under their ids") {
		t.Fatalf("redrive: %d\n%s", code, excerpt(body))
	}
	if got, err := f.c.Wait(ctx, f.failing); err != nil || got.State != task.Succeeded {
		t.Fatalf("re-driven task: %+v, %v", got, err)
	}
	if !waitState(f, f.cancelled, task.Succeeded, time.Minute) {
		h, _ := f.c.History(ctx, f.cancelled)
		hf, _ := f.c.History(ctx, f.failing)
		t.Fatalf("the dependent re-opened by the re-drive did not succeed: %+v\nupstream: %+v", h, hf)
	}
	if h, err := f.c.History(ctx, f.cancelled); err != nil || !strings.Contains(fmt.Sprint(h), "console:"+operatorName) {
		t.Fatalf("the re-opened dependent's history does not name the operator: %v\n%+v", err, h)
	}
	op.mustGet("/task/"+f.failing, "gateway is back (by alice via the console)", "Re-driven from the dead-letter queue 1 time")
	waitAudit(t, f, "redrive", f.failing)

	// Cancel the delayed task.
	if code, body = op.act("cancel", url.Values{"id": {f.delayed}}, true); code != http.StatusOK || !strings.Contains(body, "now cancelled") {
		t.Fatalf("cancel: %d\n%s", code, excerpt(body))
	}
	if st := f.state(f.delayed); st != task.Cancelled {
		t.Fatalf("cancelled task is %s", st)
	}

	// Force a re-run of a succeeded task: a new task with its spec.
	if code, body = op.act("rerun", url.Values{"id": {f.upstream}}, true); code != http.StatusOK || !strings.Contains(body, f.upstream+"-rerun-1") {
		t.Fatalf("rerun: %d\n%s", code, excerpt(body))
	}
	if got, err := f.c.Wait(ctx, f.upstream+"-rerun-1"); err != nil || got.State != task.Succeeded || got.Type != demo.TypeNoop {
		t.Fatalf("re-run: %+v, %v", got, err)
	}
	waitAudit(t, f, "rerun", f.upstream)
	op.mustGet("/task/"+f.upstream, `id="reruns"`, f.upstream+"-rerun-1")
	op.mustGet("/task/"+f.upstream+"-rerun-1", "Re-run of", "(forced)")

	// Pause and resume a type.
	if code, body = op.act("pause", url.Values{"type": {typeToggle}, "reason": {"maintenance"}}, true); code != http.StatusOK {
		t.Fatalf("pause: %d\n%s", code, excerpt(body))
	}
	g, err := f.c.Gates(ctx)
	if err != nil || g.Pauses[typeToggle].Reason != "maintenance (by alice via the console)" {
		t.Fatalf("gates after pause: %+v, %v", g, err)
	}
	testenv.Eventually(t, 10*time.Second, "the pause on the overview", func() bool {
		_, body := op.get("/?part=live")
		return strings.Contains(body, `data-paused="`+typeToggle+`"`)
	})
	if code, body = op.act("resume", url.Values{"type": {typeToggle}}, true); code != http.StatusOK {
		t.Fatalf("resume: %d\n%s", code, excerpt(body))
	}
	if g, err = f.c.Gates(ctx); err != nil || len(g.Pauses) != 0 {
		t.Fatalf("gates after resume: %+v, %v", g, err)
	}

	// Schedules: pause, resume, run now.
	for _, a := range []string{"schedule-pause", "schedule-resume", "schedule-trigger"} {
		if code, body = op.act(a, url.Values{"name": {"nightly"}}, true); code != http.StatusOK || strings.Contains(body, "✗") {
			t.Fatalf("%s: %d\n%s", a, code, excerpt(body))
		}
	}
	testenv.Eventually(t, 10*time.Second, "the schedule's manual task", func() bool {
		ids, err := f.c.TaskIDs(ctx, "nightly-manual-")
		return err == nil && len(ids) == 1
	})

	// Bulk re-drives: a canary of one of a dead-letter group, then the
	// rest through a search.
	f.broken.Store(true)
	var failing []string
	for i := range 3 {
		id, err := f.c.Submit(ctx, task.Spec{ID: fmt.Sprintf("bulk-%d-%s", i, task.NewID()), Type: typeToggle, Priority: new(1)})
		if err != nil {
			t.Fatal(err)
		}
		failing = append(failing, id)
	}
	for _, id := range failing {
		if got, err := f.c.Wait(ctx, id); err != nil || got.State != task.Failed {
			t.Fatalf("bulk task %s: %+v, %v", id, got, err)
		}
	}
	f.broken.Store(false)
	body = op.mustGet("/dlq", "payment gateway down")
	m := regexp.MustCompile(`name="group" value="(` + regexp.QuoteMeta(typeToggle) + `[^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no group form on /dlq")
	}
	group := htmlUnescape(m[1])
	code, body = op.act("redrive", url.Values{"group": {group}, "canary": {"1"}}, true)
	if code != http.StatusOK || strings.Count(body, "now ready") != 1 {
		t.Fatalf("canary: %d\n%s", code, excerpt(body))
	}
	// The canary is the oldest dead letter of the group.
	var canary string
	for i, id := range failing {
		if strings.Contains(body, id) {
			canary = id
			failing = append(failing[:i:i], failing[i+1:]...)
			break
		}
	}
	if got, err := f.c.Wait(ctx, canary); canary == "" || err != nil || got.State != task.Succeeded {
		t.Fatalf("canary %q: %+v, %v", canary, got, err)
	}
	// The search goes through the mirror: wait until it has the failures.
	testenv.Eventually(t, 20*time.Second, "the mirror to list the failed bulk tasks", func() bool {
		_, body := op.get("/tasks?state=failed&prefix=bulk-")
		return strings.Contains(body, failing[0]) && strings.Contains(body, failing[1]) && !strings.Contains(body, canary)
	})
	code, body = op.act("redrive", url.Values{"search": {"prefix=bulk-&state=failed"}}, true)
	if code != http.StatusOK || strings.Count(body, "now ready") != 2 {
		t.Fatalf("search redrive: %d\n%s", code, excerpt(body))
	}
	for _, id := range failing {
		if got, err := f.c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("bulk %s: %+v, %v", id, got, err)
		}
	}
	if body = op.mustGet("/dlq"); strings.Contains(body, typeToggle) {
		t.Fatalf("dead letters of %s left\n%s", typeToggle, excerpt(body))
	}

	// Logging out ends the operator's rights.
	if code, _ = op.post("/logout", url.Values{"csrf": {op.csrf()}}); code != http.StatusSeeOther {
		t.Fatalf("logout: %d", code)
	}
	if code, _ = op.act("cancel", url.Values{"id": {f.downstream}}, true); code != http.StatusForbidden {
		t.Fatalf("after logout: %d", code)
	}
}

// waitAudit waits for an operator audit event by alice about key.
func waitAudit(t *testing.T, f *fixture, action, key string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the audit event of "+action+" "+key, func() bool {
		evs, err := f.c.AuditEvents(context.Background(), 100)
		if err != nil {
			return false
		}
		for _, ev := range evs {
			if ev.Kind == sdk.AuditOperator && ev.Key == key && ev.To == action && ev.Actor == "console:"+operatorName {
				return true
			}
		}
		return false
	})
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&#34;", `"`, "&#39;", "'", "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(s)
}

func TestConsoleWithoutMySQL(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	b := f.browser()
	b.mustGet("/", `id="count-tasks"`, `id="count-dlq"`, "no MySQL mirror configured")
	var ov console.Overview
	if err := json.Unmarshal([]byte(b.mustGet("/api/overview")), &ov); err != nil {
		t.Fatal(err)
	}
	if ov.Source != "jetstream" || ov.States != nil || ov.Tasks < 6 || ov.Queues["AX_DLQ"] != 2 {
		t.Fatalf("overview %+v", ov)
	}
	b.mustGet("/tasks", "newest", f.failing, f.flaky)
	body := b.mustGet("/tasks?state=failed", f.failing)
	if strings.Contains(body, f.flaky) {
		t.Fatal("state filter")
	}
	b.mustGet("/tasks?id="+f.failing, f.failing)
	b.mustGet("/tasks?prefix=fail-", f.failing, "every task whose id has the prefix")
	b.mustGet("/tasks?error=gateway", f.failing)
	b.mustGet("/task/"+f.sharded, `id="shards"`, "4 planned")
	b.mustGet("/tasks?prefix="+f.sharded+"/shard/", task.ShardID(f.sharded, 3))

	// A task's durable steps and sleeps.
	ctx := testenv.Context(t, time.Minute)
	s, _ := task.New(demo.TypeSteps, demo.StepsParams{Steps: 2, Nap: "50ms", NapAfter: 1})
	s.ID = "stepper"
	if _, err := f.c.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := f.c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
		t.Fatalf("stepper: %+v, %v", got, err)
	}
	b.mustGet("/task/stepper", `id="steps"`, "<code>step-1</code>", "<code>ax:sleep:1</code>", "sleep until", "<code>step-2</code>", "<code>4</code>")
}

func TestConsoleRequireLoginAndTokens(t *testing.T) {
	t.Parallel()
	f := setup(t, false)
	s, err := console.New(console.Config{Client: f.c, RequireLogin: true, Credentials: []console.Credential{
		{Role: console.RoleOperator, Secret: "operator-token-1"}, {Role: console.RoleViewer, Secret: "viewer-token-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	f2 := *f
	f2.url = hs.URL
	b := f2.browser()
	code, _ := b.get("/tasks?state=failed")
	if code != http.StatusSeeOther {
		t.Fatalf("anonymous page with RequireLogin: %d", code)
	}
	if code, _ = b.get("/api/overview"); code != http.StatusUnauthorized {
		t.Fatalf("anonymous API with RequireLogin: %d", code)
	}
	b.mustGet("/login", `name="secret"`)

	bearer := func(method, path, token string, form url.Values) (int, string) {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := b.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := bearer(http.MethodGet, "/", "viewer-token-1", nil); code != http.StatusOK || !strings.Contains(body, "viewer (token)") {
		t.Fatalf("viewer token: %d", code)
	}
	form := url.Values{"id": {f.delayed}, "confirm": {"yes"}, "csrf": {b.csrf()}}
	if code, _ := bearer(http.MethodPost, "/actions/cancel", "viewer-token-1", form); code != http.StatusForbidden {
		t.Fatalf("viewer token cancel: %d", code)
	}
	if code, _ := bearer(http.MethodPost, "/actions/cancel", "wrong-token-1", form); code != http.StatusUnauthorized {
		t.Fatalf("wrong token cancel: %d", code)
	}
	if st := f.state(f.delayed); st != task.Waiting {
		t.Fatalf("refused cancels changed the task: %s", st)
	}
	if code, body := bearer(http.MethodPost, "/actions/cancel", "operator-token-1", form); code != http.StatusOK || !strings.Contains(body, "now cancelled") {
		t.Fatalf("operator token cancel: %d\n%s", code, excerpt(body))
	}
	if st := f.state(f.delayed); st != task.Cancelled {
		t.Fatalf("cancelled task is %s", st)
	}
}

// waitState reports whether task id reaches state within d.
func waitState(f *fixture, id string, state task.State, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if f.state(id) == state {
			return true
		}
	}
	return false
}
