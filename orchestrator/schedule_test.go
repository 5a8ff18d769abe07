package orchestrator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// scheduledTasks returns the tasks a schedule created so far, by id.
func scheduledTasks(t *testing.T, c *sdk.Client, name string) map[string]task.State {
	t.Helper()
	ctx := context.Background()
	out := map[string]task.State{}
	h, err := c.TaskIDs(ctx, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range h {
		got, err := c.Get(ctx, id)
		if err == nil {
			out[id] = got.State
		}
	}
	return out
}

func template(typ string) task.Spec {
	s, _ := task.New(typ, nil)
	return s
}

func TestScheduleFiresPausesResumesDeletes(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o1"})
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o2"}) // two may fire; one task per slot
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{}))
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)

	if _, err := c.CreateSchedule(ctx, task.Schedule{Name: "bad", Cron: "61 * * * *", Template: template("ok")}); err == nil || !strings.Contains(err.Error(), "minute") {
		t.Fatalf("bad cron: %v", err)
	}
	s, err := c.CreateSchedule(ctx, task.Schedule{Name: "tick", Cron: "@every 1s", Template: template("ok")})
	if err != nil || s.NextFire == nil {
		t.Fatalf("create: %+v %v", s, err)
	}
	testenv.Eventually(t, 20*time.Second, "three firings", func() bool { return len(scheduledTasks(t, c, "tick")) >= 3 })
	if _, err := c.PauseSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a firing already in flight may land
	paused := len(scheduledTasks(t, c, "tick"))
	time.Sleep(2500 * time.Millisecond)
	if n := len(scheduledTasks(t, c, "tick")); n != paused {
		t.Fatalf("paused schedule fired: %d tasks, then %d", paused, n)
	}
	if _, err := c.ResumeSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "firing after resume", func() bool { return len(scheduledTasks(t, c, "tick")) > paused })
	if err := c.DeleteSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if n := pendingTimers(t, c, subject.TimerSchedule, "tick"); n != 0 {
		t.Fatalf("%d timers left after delete", n)
	}
	// Every firing created exactly one task, once, and each succeeded.
	for id := range scheduledTasks(t, c, "tick") {
		got, err := c.Wait(ctx, id)
		if err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", id, got, err)
		}
		if tr := transitions(t, c, id); count(tr, ">ready") != 1 {
			t.Fatalf("%s created %d times: %v", id, count(tr, ">ready"), tr)
		}
	}
}

func TestScheduleOverlapSkip(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	var mu sync.Mutex
	running, peak := 0, 0
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("slow", func(ctx context.Context, _ *executor.Job) (any, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(2200 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := c.CreateSchedule(ctx, task.Schedule{Name: "slow", Cron: "@every 1s", Template: template("slow")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "skips", func() bool {
		s, err := c.Schedule(ctx, "slow")
		return err == nil && s.Skipped >= 2 && len(scheduledTasks(t, c, "slow")) >= 2
	})
	_ = c.DeleteSchedule(ctx, "slow")
	mu.Lock()
	defer mu.Unlock()
	if peak != 1 {
		t.Fatalf("%d runs of a skip-overlap schedule ran at once", peak)
	}
}

// TestScheduleAfterDowntime: a schedule fires once for a stretch of downtime,
// or once per missed slot with catch-up.
func TestScheduleAfterDowntime(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	orch := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)
	for _, s := range []task.Schedule{
		{Name: "once", Cron: "@every 1s", Template: template("none"), Overlap: task.OverlapAllow},
		{Name: "catchup", Cron: "@every 1s", Template: template("none"), Overlap: task.OverlapAllow, CatchUp: true},
	} {
		if _, err := c.CreateSchedule(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "first firings", func() bool {
		return len(scheduledTasks(t, c, "once")) >= 1 && len(scheduledTasks(t, c, "catchup")) >= 1
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := orch.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	before := map[string]int{"once": len(scheduledTasks(t, c, "once")), "catchup": len(scheduledTasks(t, c, "catchup"))}
	down := time.Now()
	time.Sleep(4 * time.Second) // four slots pass with no orchestrator
	up := time.Now()
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	testenv.Eventually(t, 10*time.Second, "catch-up", func() bool { return len(scheduledTasks(t, c, "catchup")) >= before["catchup"]+3 })
	time.Sleep(500 * time.Millisecond)
	// Slots that fell inside the downtime, for the schedule without catch-up.
	inDowntime := 0
	for id := range scheduledTasks(t, c, "once") {
		slot, err := time.Parse("20060102T150405Z", strings.TrimPrefix(id, "once-"))
		if err != nil {
			t.Fatalf("task id %s does not carry its slot: %v", id, err)
		}
		if slot.After(down.Add(time.Second)) && slot.Before(up.Add(-time.Second)) {
			inDowntime++
		}
	}
	if inDowntime > 1 {
		t.Fatalf("schedule without catch-up fired %d times for one stretch of downtime", inDowntime)
	}
}
