package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// The Workers page lists every executor, idle ones too, and what runs on
// each now with its progress; a task whose handler runs shows where and
// since when on its page (and in its live fragment) while its record
// still says ready.
func TestConsoleWorkersAndARunningTask(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	busy := testenv.Executor(t, srv.URL(), executor.Config{ID: "busy-1", Capabilities: []string{"render"}, Capacity: 2})
	started, release := make(chan struct{}), make(chan struct{})
	busy.HandleFunc("console.render", func(ctx context.Context, j *executor.Job) (any, error) {
		j.Progress(ctx, 60, "rendering page 3 of 5")
		close(started)
		<-release
		return nil, nil
	})
	testenv.Start(t, busy)
	idle := testenv.Executor(t, srv.URL(), executor.Config{ID: "idle-1", Capabilities: []string{"spare"}})
	idle.HandleFunc("console.spare", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, idle)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	s, err := console.New(console.Config{Client: c, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	f := &fixture{t: t, c: c, url: hs.URL}
	b := f.browser()

	testenv.Eventually(t, 30*time.Second, "both executors on the Workers page", func() bool {
		_, body := b.get("/workers")
		return strings.Contains(body, `data-worker="busy-1"`) && strings.Contains(body, `data-worker="idle-1"`)
	})
	b.mustGet("/workers", `data-idle="idle-1"`, "console.spare", `id="norunning"`, `href="/workers" class="on"`)

	id, err := c.Submit(ctx, task.Spec{Type: "console.render", Capability: "render"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	testenv.Eventually(t, 30*time.Second, "the running task on the Workers page", func() bool {
		_, body := b.get("/workers?part=live")
		return strings.Contains(body, `data-running="`+id+`"`) && strings.Contains(body, "rendering page 3 of 5")
	})
	if got := f.state(id); got != task.Ready {
		t.Fatalf("the record says %s; the page must show it running from the registry alone", got)
	}
	b.mustGet("/task/"+id, `id="running-on"`, "busy-1", "rendering page 3 of 5", "Running on executor busy-1", "its handler started",
		`data-refresh="/task/`+id+`?part=live"`)
	b.mustGet("/task/"+id+"?part=live", `id="running-on"`, "60%")
	var ov console.Overview
	if err := json.Unmarshal([]byte(b.mustGet("/api/overview")), &ov); err != nil {
		t.Fatal(err)
	}
	if len(ov.Executor) != 2 || ov.Executor[0].ID != "busy-1" || ov.Executor[0].Running != 1 || ov.Executor[0].Capacity != 2 || ov.Executor[1].ID != "idle-1" {
		t.Fatalf("overview executors %+v", ov.Executor)
	}
	close(release)
	testenv.Eventually(t, 30*time.Second, "nothing running on the Workers page", func() bool {
		_, body := b.get("/workers?part=live")
		return strings.Contains(body, `id="norunning"`)
	})
	// A ready task that no executor running now can take says why on its
	// page: idle-1 serves capability spare but has no handler for its
	// type (it passes its dispatch on, spending no attempt).
	orphan, err := c.Submit(ctx, task.Spec{Type: "console.orphan", Capability: "spare"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the orphan ready", func() bool { return f.state(orphan) == task.Ready })
	b.mustGet("/task/"+orphan, "No executor handles type", "console.orphan", "the 1 running there (idle-1) have no handler for it")
	code, body := b.get("/workers?part=secret")
	if code != 400 || !strings.Contains(body, "no part") {
		t.Fatalf("bad part: %d", code)
	}
}
