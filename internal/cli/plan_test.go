package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

func TestPlanFromGivenFigures(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"plan", "--rate", "5000", "--wait", "10s", "--exec", "500ms", "--slots", "200"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("ax plan exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"S       5000 tasks/s", "given (--rate)", "≈ 50000 tasks", "≈ 2500.0 tasks running",
		"13 without margin; 17 with a 30 % margin; 19 with a 50 % margin",
		"backlogPerReplica  4000 ", "inHandPerReplica   200 ", "oldestSeconds      10 ", "minReplicas        0 ", "maxReplicas        19 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	errOut.Reset()
	if code := Run(context.Background(), []string{"plan", "--rate", "10"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "--wait") {
		t.Errorf("ax plan without --wait/--exec: exit %d, %q", code, errOut.String())
	}
}

// TestPlanFromLiveMetrics measures a running orchestrator and executor
// (each scraped at its own URL) while tasks flow.
func TestPlanFromLiveMetrics(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	oreg, ereg := prometheus.NewRegistry(), prometheus.NewRegistry()
	om := promorch.New(oreg)
	om.Watch(testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: om, SampleInterval: 100 * time.Millisecond}))
	em := promexec.New(ereg)
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 4, Metrics: em, Hooks: []executor.AttemptHook{em.Hook}})
	em.Watch(ex)
	ex.HandleFunc("work", func(ctx context.Context, _ *executor.Job) (any, error) {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	ou := httptest.NewServer(promhttp.HandlerFor(oreg, promhttp.HandlerOpts{}))
	t.Cleanup(ou.Close)
	eu := httptest.NewServer(promhttp.HandlerFor(ereg, promhttp.HandlerOpts{}))
	t.Cleanup(eu.Close)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)

	// Tasks flow until the plan has measured.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, _ := task.New("work", nil)
			if _, err := c.Submit(ctx, s); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var out, errOut bytes.Buffer
	code := Run(ctx, []string{"plan", "-o", "json", "--metrics", ou.URL, "--metrics", eu.URL, "--interval", "2s", "--wait", "1s"}, &out, &errOut)
	close(done)
	wg.Wait()
	if code != 0 {
		t.Fatalf("ax plan exited %d: %s", code, errOut.String())
	}
	var p planOutput
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if p.Rate.Value <= 0 || !strings.Contains(p.Rate.Source, "measured") {
		t.Errorf("rate %+v", p.Rate)
	}
	if p.Exec.Value < 0.02 || !strings.Contains(p.Exec.Source, "mean handler time") {
		t.Errorf("exec %+v: the handler sleeps 20ms", p.Exec)
	}
	if p.Wait.Value != 1 || !strings.Contains(p.Wait.Source, "given") {
		t.Errorf("wait %+v: given as 1s", p.Wait)
	}
	if p.Slots.Value != 4 || p.Now == nil || p.Now.Executors != 1 {
		t.Errorf("slots %+v, now %+v: one executor of capacity 4", p.Slots, p.Now)
	}
	if want := p.Rate.Value * p.Exec.Value; p.Concurrency != want {
		t.Errorf("concurrency %v, want S × T_exec = %v", p.Concurrency, want)
	}
	// The KEDA thresholds from the measured figures.
	a := p.Autoscaling
	if want := 4 / p.Exec.Value * 1; math.Abs(a.BacklogPerReplica-want) > 1 || a.InHandPerReplica != 4 || a.OldestSeconds != 1 || a.MinReplicas != 0 || a.MaxReplicas < 1 {
		t.Errorf("autoscaling %+v: want %v backlog per replica (4 slots / %vs × 1s), 4 in hand, 1s", a, want, p.Exec.Value)
	}
}
