package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

// The memo marks only executions whose end was written here, forgets a
// timer once it fired or long after it was due, and follows nothing past
// its bound.
func TestSweepMemo(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	m := newSweepMemo(time.Minute)
	a, b := m.dispatched("ex-a"), m.dispatched("ex-b")
	if a == nil || b == nil || m.dispatched("ex-a") != a {
		t.Fatalf("slots %p %p, again %p", a, b, m.dispatched("ex-a"))
	}
	m.ended("ex-a") // before its timer is stored: the slot is marked all the same
	m.stored("sweep-1", now.Add(time.Minute), []*sweepSlot{a, b, nil}, now)
	m.ended("ex-c") // not followed: nothing happens
	if got := m.fired("sweep-1", 2); got != nil {
		t.Fatalf("a timer of 3 entries fired with 2: %v, want nothing skipped", got)
	}
	m.stored("sweep-2", now.Add(time.Minute), []*sweepSlot{a, b, nil}, now)
	got := m.fired("sweep-2", 3)
	if len(got) != 3 || !got[0].ended.Load() || got[1].ended.Load() || got[2] != nil {
		t.Fatalf("fired: %v, want a ended, b not, c unknown", got)
	}
	if m.fired("sweep-2", 3) != nil || len(m.running) != 0 {
		t.Fatalf("after firing: timer kept, or %d executions still followed", len(m.running))
	}

	// A timer that fired elsewhere is forgotten once well past due.
	c := m.dispatched("ex-d")
	m.stored("sweep-3", now.Add(time.Minute), []*sweepSlot{c}, now)
	m.stored("sweep-4", now.Add(4*time.Minute), []*sweepSlot{m.dispatched("ex-e")}, now.Add(3*time.Minute))
	if _, ok := m.timers["sweep-3"]; ok || m.running["ex-d"] != nil {
		t.Fatal("a timer two intervals past due is still followed")
	}
	if _, ok := m.timers["sweep-4"]; !ok || m.running["ex-e"] == nil {
		t.Fatal("a timer not yet due was forgotten")
	}

	// Past the bound, new executions are not followed (their sweep reads).
	for i := len(m.running); i < maxSweepMemo; i++ {
		m.running[fmt.Sprint(i)] = &sweepSlot{}
	}
	if s := m.dispatched("one-more"); s != nil {
		t.Fatal("a full memo followed one more execution")
	}
	var none *sweepMemo
	if none.dispatched("x") != nil || none.fired("x", 1) != nil {
		t.Fatal("a nil memo follows something")
	}
	none.ended("x")
	none.stored("x", now, nil, now)
}

// A sweep firing on the orchestrator that wrote its tasks' ends reads none
// of them; it still looks at a task that has not ended.
func TestSweepSkipsTasksEndedHere(t *testing.T) {
	t.Parallel()
	o, c, ctx := startInternal(t, Config{ReconcileInterval: time.Second, ReconcileMaxInterval: time.Minute, RunGrace: time.Minute})
	release, held := make(chan struct{}), make(chan struct{})
	var started sync.Once
	ex, err := executor.New(o.nc, executor.Config{Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	ex.HandleFunc("memo.ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("memo.hold", func(ctx context.Context, _ *executor.Job) (any, error) {
		started.Do(func() { close(held) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, nil
	})
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ex.Stop(sctx)
	})
	swept := func() bool {
		o.sweepMemo.mu.Lock()
		defer o.sweepMemo.mu.Unlock()
		return len(o.sweepMemo.timers) == 0 && len(o.sweepMemo.running) == 0
	}

	const n = 40
	specs := make([]task.Spec, n)
	for i := range specs {
		specs[i], _ = task.New("memo.ok", nil)
		specs[i].ID = fmt.Sprintf("memo-ok-%d", i)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	before := o.StoreReads()
	waitUntil(t, "the sweeps of the ended tasks fired", swept)
	if reads := o.StoreReads() - before; reads != 0 {
		t.Fatalf("the sweeps of %d tasks that ended here read %d records, want none", n, reads)
	}

	hold, _ := task.New("memo.hold", nil)
	hold.ID = "memo-hold"
	before = o.StoreReads()
	if _, err := c.Submit(ctx, hold); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the held task's handler never started")
	}
	// Its execution is followed until its sweep fires, which reads it.
	waitUntil(t, "the running task's sweep", func() bool { return swept() && o.StoreReads() > before })
}

// waitUntil waits for cond, polling, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
