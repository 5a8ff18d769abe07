package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Console credentials of the browser test (in a file: never on a command line).
const (
	consoleOperator   = "olga"
	consoleOperatorPW = "olga-password-1"
	consoleViewer     = "vince"
	consoleViewerPW   = "vince-password-1"
	typeReport        = "report.build"
	typeRender        = "report.render"
)

// TestConsoleBrowser drives the web console in headless Chromium against
// real processes (ax server, ax orchestrator with the MySQL mirror, ax
// worker, ax console): the overview, a search for a failed task, its page
// with attempts and DAG, a re-drive that makes it succeed, a pause and
// resume of a type, and read-only users refused. With
// AX_CONSOLE_SCREENSHOTS=DIR it saves screenshots of the main pages there
// (the README's come from AX_CONSOLE_SCREENSHOTS=../docs).
func TestConsoleBrowser(t *testing.T) {
	chromium := ensureChromium(t)
	c := newCluster(t)
	dsn, _ := mirrortest.DB(t)
	c.startServer()
	c.startOrchestrator("orch-1", "--mysql-dsn", dsn)
	c.startWorker("worker-1")
	waitTopology(t, c.url)
	nc, cl := c.connect()
	warmUp(t, cl, "default")

	// The report builder's warehouse is down until the test "fixes" it.
	var fixed atomic.Bool
	ex, err := executor.New(nc, executor.Config{ID: "reports-1", Capabilities: []string{"reports"}, Capacity: 4})
	if err != nil {
		t.Fatal(err)
	}
	ex.HandleFunc(typeReport, func(_ context.Context, j *executor.Job) (any, error) {
		if !fixed.Load() {
			return nil, fmt.Errorf("warehouse unavailable: connection to 10.0.0.%d:5432 refused", 10+j.Attempt)
		}
		return map[string]any{"rows": 1234, "report": j.ID}, nil
	})
	// A long render reports its progress: the Workers page and its task
	// page show where it runs and how far it is, before its record says
	// running.
	rendering, renderDone := make(chan struct{}), make(chan struct{})
	ex.HandleFunc(typeRender, func(ctx context.Context, j *executor.Job) (any, error) {
		j.Progress(ctx, 60, "rendering page 3 of 5")
		close(rendering)
		select {
		case <-renderDone:
		case <-ctx.Done():
		}
		return nil, nil
	})
	if err := ex.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ex.Stop(ctx)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	src, mail := "report-src-"+task.NewID(), "report-mail-"+task.NewID()
	var reports []string
	for i := range 3 {
		reports = append(reports, fmt.Sprintf("report-%d-%s", i, task.NewID()))
	}
	graph := []task.Spec{{ID: src, Type: demo.TypeNoop, Priority: new(1), Capability: "default", MaxRetries: new(1)}}
	for _, id := range reports {
		graph = append(graph, task.Spec{ID: id, Type: typeReport, Priority: new(1), Capability: "reports", MaxRetries: new(1),
			DependsOn: []string{src}, Payload: []byte(`{"day":"2026-11-29"}`)})
	}
	graph = append(graph, task.Spec{ID: mail, Type: demo.TypeNoop, Priority: new(2), Capability: "default", DependsOn: []string{reports[0]}})
	if _, err := cl.SubmitGraph(ctx, graph); err != nil {
		t.Fatal(err)
	}
	var others []task.Spec
	for i := range 12 {
		others = append(others, task.Spec{Type: demo.TypeSleep, Priority: new(i % 6), Capability: "default", MaxRetries: new(1),
			Payload: []byte(`{"sleep":"30ms"}`)})
	}
	others = append(others, task.Spec{Type: demo.TypeFlaky, Priority: new(2), Capability: "default", MaxRetries: new(3), Payload: []byte(`{"fail_times":2}`)})
	if _, err := cl.SubmitMany(ctx, others); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateSchedule(ctx, task.Schedule{Name: "nightly-report", Cron: "0 2 * * *", TimeZone: "Europe/Berlin",
		Template: task.Spec{Type: typeReport, Priority: new(2), Capability: "reports", MaxRetries: new(1)}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range reports {
		if got, err := cl.Wait(ctx, id); err != nil || got.State != task.Failed {
			t.Fatalf("report %s: %+v, %v", id, got, err)
		}
	}

	credFile := filepath.Join(c.dir, "console-users")
	if err := os.WriteFile(credFile, []byte(fmt.Sprintf("# name role secret\n%s operator %s\n%s viewer %s\n",
		consoleOperator, consoleOperatorPW, consoleViewer, consoleViewerPW)), 0o600); err != nil {
		t.Fatal(err)
	}
	cons := c.newProc("console", "console", "--nats", c.url, "--addr", "127.0.0.1:0", "--mysql-dsn", dsn,
		"--credentials-file", credFile, "--log-level", logLevel())
	cons.start()
	base := waitConsoleURL(t, cons)

	shots := os.Getenv("AX_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-dev-shm-usage", true))...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	// The first Run starts the browser on bctx (a step's timeout context
	// would close it when the step ends).
	if err := chromedp.Run(bctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Run(sctx, actions...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), png, 0o644)
		})
	}
	text := func(sel string) string {
		t.Helper()
		var s string
		run("read "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
		return s
	}
	login := func(name, pw string) {
		t.Helper()
		run("log in as "+name,
			chromedp.Navigate(base+"login?next=/tasks"),
			chromedp.WaitVisible(`input[name="secret"]`, chromedp.ByQuery),
			chromedp.SendKeys(`input[name="name"]`, name, chromedp.ByQuery),
			chromedp.SendKeys(`input[name="secret"]`, pw, chromedp.ByQuery),
			chromedp.Submit(`input[name="secret"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#results, #noresults`, chromedp.ByQuery))
	}
	logout := func() {
		t.Helper()
		run("log out", chromedp.Click(`form[action="/logout"] button`, chromedp.ByQuery), chromedp.WaitVisible(`#live`, chromedp.ByQuery))
	}
	taskURL := base + "task/" + reports[0]

	// The overview: live, with charts from the mirror.
	c.waitMirrored(t, dsn, reports[0], "failed")
	run("overview",
		chromedp.Navigate(base),
		chromedp.WaitVisible(`#live #count-failed`, chromedp.ByQuery),
		chromedp.WaitVisible(`#charts .chart canvas`, chromedp.ByQuery),
		chromedp.WaitVisible(`#executors`, chromedp.ByQuery),
		shot("console-overview.png"))
	if got := text("#count-failed"); strings.TrimSpace(got) == "" || got == "0" {
		t.Fatalf("overview counts %q failed tasks", got)
	}

	// What runs where: the render's executor and its progress, live.
	render, err := cl.Submit(ctx, task.Spec{ID: "render-" + task.NewID(), Type: typeRender, Capability: "reports"})
	if err != nil {
		t.Fatal(err)
	}
	<-rendering
	run("workers",
		chromedp.Navigate(base+"workers"),
		chromedp.WaitVisible(`#workers tr[data-worker="reports-1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#running tr[data-running="`+render+`"]`, chromedp.ByQuery),
		// The progress reaches the page with the executor's next lease
		// write and the page's next live refresh (every second): wait for
		// it there (the run's context bounds the wait).
		chromedp.Poll(`(document.querySelector("#running")?.innerText || "").includes("rendering page 3 of 5")`, nil,
			chromedp.WithPollingTimeout(0)),
		shot("console-workers.png"))
	if got := text("#running"); !strings.Contains(got, "rendering page 3 of 5") || !strings.Contains(got, "60%") {
		t.Fatalf("running now: %q", got)
	}
	if got := text("#workers"); !strings.Contains(got, "worker-1") || !strings.Contains(got, typeReport) {
		t.Fatalf("workers: %q", got)
	}
	run("the running task",
		chromedp.Navigate(base+"task/"+render),
		chromedp.WaitVisible(`#running-on`, chromedp.ByQuery))
	if got := text("#why"); !strings.Contains(got, "Running on executor reports-1") {
		t.Fatalf("why of the running task: %q", got)
	}
	if got := text("#progress"); !strings.Contains(got, "rendering page 3 of 5") {
		t.Fatalf("progress: %q", got)
	}
	close(renderDone)
	if got, err := cl.Wait(ctx, render); err != nil || got.State != task.Succeeded {
		t.Fatalf("render: %+v, %v", got, err)
	}

	// Read-only: anonymous, then a viewer; their re-drive is refused.
	run("anonymous re-drive",
		chromedp.Navigate(taskURL),
		chromedp.WaitVisible(`#redrive`, chromedp.ByQuery),
		chromedp.Click(`#redrive`, chromedp.ByQuery),
		chromedp.WaitVisible(`#error`, chromedp.ByQuery))
	if got := text("#error"); !strings.Contains(got, "Read-only") || !strings.Contains(got, "Nothing was changed") {
		t.Fatalf("anonymous re-drive: %q", got)
	}
	login(consoleViewer, consoleViewerPW)
	if got := text("#user"); !strings.Contains(got, "viewer") {
		t.Fatalf("viewer login shows %q", got)
	}
	run("viewer re-drive",
		chromedp.Navigate(taskURL),
		chromedp.WaitVisible(`#redrive`, chromedp.ByQuery),
		chromedp.Click(`#redrive`, chromedp.ByQuery),
		chromedp.WaitVisible(`#error`, chromedp.ByQuery),
		shot("console-read-only.png"))
	if got := text("#error"); !strings.Contains(got, "read-only") {
		t.Fatalf("viewer re-drive: %q", got)
	}
	if st := taskState(t, cl, reports[0]); st != task.Failed {
		t.Fatalf("a refused re-drive changed the task: %s", st)
	}
	logout()

	// An operator searches the failed task, opens it, sees attempts and DAG.
	login(consoleOperator, consoleOperatorPW)
	if got := text("#user"); !strings.Contains(got, consoleOperator) || !strings.Contains(got, "operator") {
		t.Fatalf("operator login shows %q", got)
	}
	run("dead letters", chromedp.Navigate(base+"dlq"), chromedp.WaitVisible(`#groups`, chromedp.ByQuery), shot("console-dlq.png"))
	if got := text("#groups"); !strings.Contains(got, "warehouse unavailable: connection to <n>.<n>.<n>.<n>:<n> refused") || !strings.Contains(got, "3") {
		t.Fatalf("dead-letter groups: %q", got)
	}
	run("schedules", chromedp.Navigate(base+"schedules"), chromedp.WaitVisible(`#schedules`, chromedp.ByQuery), shot("console-schedules.png"))
	run("search",
		chromedp.Navigate(base+"tasks"),
		chromedp.WaitVisible(`#search`, chromedp.ByQuery),
		chromedp.SetValue(`#search select[name="state"]`, "failed", chromedp.ByQuery),
		chromedp.SendKeys(`#search input[name="prefix"]`, "report-", chromedp.ByQuery),
		chromedp.Click(`#search button`, chromedp.ByQuery),
		// The results page links to its own search (the page before
		// listed every task, with a #results table too).
		chromedp.WaitVisible(`#self[href*="state=failed"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#results`, chromedp.ByQuery),
		shot("console-search.png"))
	if got := text("#results"); !strings.Contains(got, reports[0]) || !strings.Contains(got, "warehouse unavailable") || strings.Contains(got, src) {
		t.Fatalf("search results: %q", got)
	}
	run("open the task",
		chromedp.Click(`#results a[href="/task/`+reports[0]+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#attempts`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dag svg`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dag a[data-id="`+src+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#dag a[data-id="`+mail+`"]`, chromedp.ByQuery),
		shot("console-task.png"))
	if got := text("#attempts"); strings.Count(got, "warehouse unavailable") != 2 || !strings.Contains(got, "reports-1") {
		t.Fatalf("attempts: %q", got)
	}
	if got := text("#why"); !strings.Contains(got, "It ran 2 times") || !strings.Contains(got, "dead-letter queue") {
		t.Fatalf("why: %q", got)
	}
	// Its record: the trigger rule and its input, the source it read.
	if got := text("#trigger-rule"); !strings.Contains(got, "all_succeeded") {
		t.Fatalf("trigger rule: %q", got)
	}
	if got := text("#inputs"); !strings.Contains(got, src) || !strings.Contains(got, "succeeded") {
		t.Fatalf("inputs: %q", got)
	}
	// The mail its failure cancelled names it, and how to re-open it.
	eventually(t, time.Minute, "the mail to be cancelled", func() (bool, string) {
		st := taskState(t, cl, mail)
		return st == task.Cancelled, string(st)
	})
	run("the cancelled dependent",
		chromedp.Navigate(base+"task/"+mail),
		chromedp.WaitVisible(`#cancelled-by`, chromedp.ByQuery))
	if got := text("#cancelled-by"); !strings.Contains(got, reports[0]) {
		t.Fatalf("cancelled by: %q", got)
	}
	if got := text("#why"); !strings.Contains(got, "ax redrive "+reports[0]+" --with-dependents") {
		t.Fatalf("why of the cancelled dependent: %q", got)
	}
	run("back to the task",
		chromedp.Navigate(base+"task/"+reports[0]),
		chromedp.WaitVisible(`#attempts`, chromedp.ByQuery))

	// The warehouse is back: re-drive the task and watch it succeed.
	fixed.Store(true)
	run("re-drive",
		chromedp.Click(`#redrive`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.SendKeys(`#confirm input[name="reason"]`, "warehouse is back", chromedp.ByQuery),
		shot("console-confirm.png"),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery))
	if got := text("#done"); !strings.Contains(got, "now ready") {
		t.Fatalf("re-drive result: %q", got)
	}
	if got, err := cl.Wait(ctx, reports[0]); err != nil || got.State != task.Succeeded {
		t.Fatalf("re-driven task: %+v, %v", got, err)
	}
	run("the task succeeded",
		chromedp.Click(`#back`, chromedp.ByQuery),
		chromedp.WaitVisible(`#result`, chromedp.ByQuery))
	if got := text("h1"); !strings.Contains(got, "succeeded") {
		t.Fatalf("task heading after re-drive: %q", got)
	}
	if got := text("#timeline"); !strings.Contains(got, "warehouse is back (by "+consoleOperator+" via the console)") {
		t.Fatalf("timeline lacks who re-drove it: %q", got)
	}
	if got := text("#attempts"); !strings.Contains(got, "succeeded") {
		t.Fatalf("attempts after re-drive: %q", got)
	}

	// A person's approval: an event task waits for it; the operator opens
	// its page, sees the wait, approves it with a reason, and it succeeds
	// with the approval as its result, releasing its dependent.
	approval, shipping := "approval-"+task.NewID(), "ship-"+task.NewID()
	if _, err := cl.SubmitGraph(ctx, []task.Spec{
		{ID: approval, Type: "refund.approval", Capability: "default",
			WaitFor: &task.EventWait{Subject: "refund.approved", Match: approval, Timeout: task.Duration(time.Hour)}},
		{ID: shipping, Type: demo.TypeNoop, Capability: "default", DependsOn: []string{approval}},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, approval+" waiting for its event", func() (bool, string) {
		got, err := cl.Get(ctx, approval)
		return err == nil && got.EventWaitSince != nil, fmt.Sprintf("%+v %v", got, err)
	})
	run("open the waiting event task",
		chromedp.Navigate(base+"task/"+approval),
		chromedp.WaitVisible(`#approve`, chromedp.ByQuery),
		chromedp.WaitVisible(`#reject`, chromedp.ByQuery),
		chromedp.WaitVisible(`#wait-for`, chromedp.ByQuery),
		shot("console-approval.png"))
	if got := text("#wait-for"); !strings.Contains(got, "ax.event.refund.approved."+approval) {
		t.Fatalf("the event task's wait: %q", got)
	}
	run("approve",
		chromedp.Click(`#approve`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.SendKeys(`#confirm input[name="reason"]`, "receipt checked", chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery))
	if got := text("#done"); !strings.Contains(got, "now succeeded") {
		t.Fatalf("approve result: %q", got)
	}
	if got, err := cl.Wait(ctx, approval); err != nil || got.State != task.Succeeded || got.Approval == nil ||
		got.Approval.By != "console:"+consoleOperator || got.Approval.Reason != "receipt checked" {
		t.Fatalf("approved task: %+v, %v", got, err)
	}
	if got, err := cl.Wait(ctx, shipping); err != nil || got.State != task.Succeeded {
		t.Fatalf("the approved task's dependent: %+v, %v", got, err)
	}
	run("the approved task",
		chromedp.Click(`#back`, chromedp.ByQuery),
		chromedp.WaitVisible(`#approval`, chromedp.ByQuery))
	if got := text("h1"); !strings.Contains(got, "succeeded") {
		t.Fatalf("the approved task's heading: %q", got)
	}
	if got := text("#approval"); !strings.Contains(got, "console:"+consoleOperator) || !strings.Contains(got, "receipt checked") {
		t.Fatalf("the approved task's approval: %q", got)
	}

	// Pause the type, see it paused, resume it.
	run("pause",
		chromedp.Navigate(base),
		chromedp.WaitVisible(`#pause-form`, chromedp.ByQuery),
		chromedp.SendKeys(`#pause-form input[name="type"]`, typeReport, chromedp.ByQuery),
		chromedp.Click(`#pause-form button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery),
		chromedp.Navigate(base),
		chromedp.WaitVisible(`tr[data-paused="`+typeReport+`"]`, chromedp.ByQuery))
	if g, err := cl.Gates(ctx); err != nil || !strings.Contains(g.Pauses[typeReport].Reason, consoleOperator) {
		t.Fatalf("gates after pausing: %+v, %v", g, err)
	}
	run("resume",
		chromedp.Click(`tr[data-paused="`+typeReport+`"] button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery),
		chromedp.Navigate(base),
		chromedp.WaitVisible(`#gates`, chromedp.ByQuery))
	if g, err := cl.Gates(ctx); err != nil || len(g.Pauses) != 0 {
		t.Fatalf("gates after resuming: %+v, %v", g, err)
	}
	if got := text("#gates"); strings.Contains(got, "Resume") {
		t.Fatalf("overview still shows a pause: %q", got)
	}
	// The other two reports' dead letters are not worth re-driving:
	// discard their group after a confirmation.
	run("discard a dead-letter group",
		chromedp.Navigate(base+"dlq"),
		chromedp.WaitVisible(`button[data-discard-group="`+typeReport+`"]`, chromedp.ByQuery),
		chromedp.Click(`button[data-discard-group="`+typeReport+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.SendKeys(`#confirm input[name="reason"]`, "superseded by the re-run", chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery),
		chromedp.Navigate(base+"dlq"),
		chromedp.WaitVisible(`#nodlq`, chromedp.ByQuery))
	for _, id := range reports[1:] {
		if st := taskState(t, cl, id); st != task.Failed {
			t.Fatalf("discarded %s is %s, want still failed", id, st)
		}
	}

	// Schedules: create one that fires a whole graph, edit another,
	// delete the first; each after a confirmation.
	setValue := func(sel, v string) chromedp.Action {
		return chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).value = %q`, sel, v), nil)
	}
	graphJSON := `{"tasks":[{"id":"extract","type":"demo.noop"},{"id":"load","type":"demo.noop","depends_on":["extract"]}]}`
	run("new schedule",
		chromedp.Navigate(base+"schedules"),
		chromedp.WaitVisible(`#new-schedule`, chromedp.ByQuery),
		chromedp.Click(`#new-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(`#schedule-form`, chromedp.ByQuery),
		chromedp.SendKeys(`#f-name`, "nightly-etl", chromedp.ByQuery),
		chromedp.SendKeys(`#f-cron`, "0 3 * * *", chromedp.ByQuery),
		chromedp.SendKeys(`#f-tz`, "Europe/Berlin", chromedp.ByQuery),
		setValue(`#f-graph`, graphJSON),
		shot("console-schedule-form.png"),
		chromedp.Click(`#save-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery),
		chromedp.Navigate(base+"schedules"),
		chromedp.WaitVisible(`tr[data-schedule="nightly-etl"]`, chromedp.ByQuery))
	if got := text(`tr[data-schedule="nightly-etl"]`); !strings.Contains(got, "graph of 2 tasks") {
		t.Fatalf("the new schedule's row: %q", got)
	}
	if s, err := cl.Schedule(ctx, "nightly-etl"); err != nil || len(s.Graph) != 2 || s.TimeZone != "Europe/Berlin" {
		t.Fatalf("the new schedule: %+v, %v", s, err)
	}
	run("edit a schedule",
		chromedp.Click(`a[data-edit="nightly-report"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#schedule-form`, chromedp.ByQuery),
		setValue(`#f-cron`, "30 4 * * *"),
		chromedp.Click(`#save-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery))
	if s, err := cl.Schedule(ctx, "nightly-report"); err != nil || s.Cron != "30 4 * * *" || s.Template.Type != typeReport || s.TimeZone != "Europe/Berlin" {
		t.Fatalf("the edited schedule: %+v, %v", s, err)
	}
	run("delete a schedule",
		chromedp.Navigate(base+"schedules"),
		chromedp.WaitVisible(`button[data-delete="nightly-etl"]`, chromedp.ByQuery),
		chromedp.Click(`button[data-delete="nightly-etl"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-button`, chromedp.ByQuery),
		chromedp.WaitVisible(`#done`, chromedp.ByQuery))
	if _, err := cl.Schedule(ctx, "nightly-etl"); err == nil {
		t.Fatal("the deleted schedule is still there")
	}

	// The overview's audit list names the operator.
	run("audit list", chromedp.Navigate(base), chromedp.WaitVisible(`#audit`, chromedp.ByQuery))
	if got := text("#audit"); !strings.Contains(got, "console:"+consoleOperator) {
		t.Fatalf("audit events: %q", got)
	}
}

// ensureChromium returns the path of a Chromium, installing Debian's
// package with apt when run as root; it skips the test, saying why, only
// where it cannot.
func ensureChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped with -short")
	}
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		t.Skip("the browser test needs Chromium: install Debian's chromium package (apt-get install chromium) " +
			"or run the test as root on Debian/Ubuntu so it installs it")
	}
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "install", "-y", "-q", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	out, err := install()
	if err != nil {
		if upd, uerr := exec.Command("apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			t.Skipf("the browser test needs Chromium and apt-get update failed: %v\n%s", uerr, upd)
		}
		out, err = install()
	}
	if p := find(); err == nil && p != "" {
		return p
	}
	t.Skipf("the browser test needs Chromium and apt-get install chromium failed: %v\n%s", err, out)
	return ""
}

// waitConsoleURL waits for ax console to print its URL.
func waitConsoleURL(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if !p.alive() {
			t.Fatalf("console exited at start: %v\n%s", p.cur.err, tail(p.logPath, 30))
		}
		data, _ := os.ReadFile(p.logPath)
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "AX console at "); ok {
				return strings.Fields(rest)[0]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("console printed no URL within 60s\n%s", tail(p.logPath, 30))
	return ""
}

// waitMirrored waits until the mirror has the task in the state.
func (c *cluster) waitMirrored(t *testing.T, dsn, id, state string) {
	t.Helper()
	db, err := mirror.Open(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, 60*time.Second, "the mirror to have "+id+" "+state, func() (bool, string) {
		var got string
		err := db.QueryRow("SELECT state FROM ax_tasks WHERE id = ?", id).Scan(&got)
		return err == nil && got == state, fmt.Sprintf("%q, %v", got, err)
	})
}

func taskState(t *testing.T, cl interface {
	Get(context.Context, string) (*task.Task, error)
}, id string) task.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := cl.Get(ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return got.State
}

// waitTopology waits until the orchestrator created AX's streams (clients
// do not create them).
func waitTopology(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	eventually(t, 60*time.Second, "the orchestrator to create AX's streams", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := sdk.New(ctx, nc)
		return err == nil, fmt.Sprint(err)
	})
}
