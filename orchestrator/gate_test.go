package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	orch := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("mail", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("sms", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc("once", func(_ context.Context, j *executor.Job) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)

	if err := c.Pause(ctx, "mail", false, "mail provider maintenance"); err != nil {
		t.Fatal(err)
	}
	// Paused state is durable: a restarted orchestrator keeps holding.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := orch.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	var specs []task.Spec
	for i := range 5 {
		specs = append(specs, newSpec(fmt.Sprint("mail-", i), "mail"), newSpec(fmt.Sprint("sms-", i), "sms"))
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got, err := c.Wait(ctx, fmt.Sprint("sms-", i)); err != nil || got.State != task.Succeeded {
			t.Fatalf("other type blocked: %+v %v", got, err)
		}
	}
	for i := range 5 {
		got, err := c.Get(ctx, fmt.Sprint("mail-", i))
		if err != nil || got.State != task.Waiting || got.Reason != "held: dispatch paused for type mail" {
			t.Fatalf("paused type ran or is not visibly held: %+v %v", got, err)
		}
	}
	gates, err := c.Gates(ctx)
	if err != nil || gates.Pauses["mail"].Reason != "mail provider maintenance" {
		t.Fatalf("gates %+v %v", gates, err)
	}
	if err := c.Resume(ctx, "mail", "maintenance over"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if got, err := c.Wait(ctx, fmt.Sprint("mail-", i)); err != nil || got.State != task.Succeeded {
			t.Fatalf("not released: %+v %v", got, err)
		}
	}

	// Retries only, for every type: new work runs, retries wait.
	if err := c.Pause(ctx, "", true, "retry storm"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, newSpec("retry-me", "once")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "retry held", func() bool {
		got, err := c.Get(ctx, "retry-me")
		return err == nil && got.State == task.Retrying && got.Reason == "held: retries paused for all types"
	})
	if _, err := c.Submit(ctx, newSpec("fresh", "mail")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "fresh"); err != nil || got.State != task.Succeeded {
		t.Fatalf("new task blocked by a retries-only pause: %+v %v", got, err)
	}
	if err := c.Resume(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "retry-me"); err != nil || got.State != task.Succeeded || got.Attempt != 2 {
		t.Fatalf("held retry: %+v %v", got, err)
	}
	evs, err := c.AuditEvents(ctx, 10)
	if err != nil || len(evs) != 4 || evs[0].Kind != "pause" || evs[0].Key != "mail" || evs[3].To != "running" {
		t.Fatalf("audit events %+v %v", evs, err)
	}
}

func TestCircuitBreakerHoldsProbesAndCloses(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{
		Retry:   fastRetry,
		Breaker: orchestrator.BreakerConfig{Window: 30 * time.Second, MinVolume: 6, Threshold: 0.5, Cooldown: time.Second, Probes: 2},
	})
	var healthy atomic.Bool
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("charge", func(context.Context, *executor.Job) (any, error) {
		if !healthy.Load() {
			return nil, errors.New("payment gateway down")
		}
		return nil, nil
	})
	ex.HandleFunc("other", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 60*time.Second)

	var specs []task.Spec
	for i := range 8 {
		s := newSpec(fmt.Sprint("charge-", i), "charge")
		s.MaxRetries = new(20)
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "breaker open", func() bool {
		g, err := c.Gates(ctx)
		return err == nil && g.Breakers["charge"].State == "open"
	})
	// Other types flow; this type's new tasks are held, visibly.
	if _, err := c.Submit(ctx, newSpec("other-1", "other")); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "other-1"); err != nil || got.State != task.Succeeded {
		t.Fatalf("other type: %+v %v", got, err)
	}
	if _, err := c.Submit(ctx, newSpec("charge-new", "charge")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "new task held", func() bool {
		got, err := c.Get(ctx, "charge-new")
		return err == nil && strings.HasPrefix(got.Reason, "held: circuit breaker")
	})
	healthy.Store(true) // the gateway recovers: probes succeed, the breaker closes
	for _, s := range append(specs, newSpec("charge-new", "charge")) {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "breaker closed", func() bool {
		g, err := c.Gates(ctx)
		return err == nil && g.Breakers["charge"].State == "closed"
	})
	evs, err := c.AuditEvents(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, ev := range evs {
		if ev.Kind == "breaker" {
			path = append(path, ev.To)
		}
	}
	// Under load the 1 s cooldown can pass before the gateway recovers: a
	// failed probe re-opens the breaker, so open/half_open may repeat.
	trail := strings.Join(path, ",")
	if !strings.HasPrefix(trail, "open,") || !strings.HasSuffix(trail, ",half_open,closed") || strings.Count(trail, "closed") != 1 {
		t.Fatalf("breaker audit trail %v, want open, (half_open, open)…, half_open, closed", path)
	}
}
