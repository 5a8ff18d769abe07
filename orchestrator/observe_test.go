package orchestrator_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
	"github.com/ax-run/ax/task"
)

// series returns the metric of a family with exactly these labels (nil
// when there is none).
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue metric
				}
			}
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value, or a histogram's count (-1: no such series).
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := series(t, reg, name, labels)
	switch {
	case m == nil:
		return -1
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetGauge().GetValue()
}

// TestMetricsOfAKnownWorkload runs N tasks that succeed, K that fail once
// and then succeed, one that fails for good, and a backlog nobody serves,
// and checks every series against it.
func TestMetricsOfAKnownWorkload(t *testing.T) {
	t.Parallel()
	const n, k, backlog = 6, 3, 4
	srv := testenv.NATS(t)
	reg := prometheus.NewRegistry()
	om := promorch.New(reg)
	om.Watch(testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Metrics: om, Retry: fastRetry, SampleInterval: 50 * time.Millisecond}))
	em := promexec.New(reg)
	ex := testenv.Executor(t, srv.URL(), executor.Config{Metrics: em, Hooks: []executor.AttemptHook{em.Hook}, Capacity: 8})
	em.Watch(ex)
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	var mu sync.Mutex
	failed := map[string]bool{}
	ex.HandleFunc("flaky", func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if !failed[j.ID] {
			failed[j.ID] = true
			return nil, errors.New("first attempt fails")
		}
		return nil, nil
	})
	ex.HandleFunc("bad", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("always fails") })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)

	var ids []string
	submit := func(s task.Spec) {
		t.Helper()
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	for i := range n {
		s := newSpec("ok-"+string(rune('a'+i)), "ok")
		s.Priority = new(0)
		submit(s)
	}
	for i := range k {
		s := newSpec("flaky-"+string(rune('a'+i)), "flaky")
		s.Priority = new(3)
		submit(s)
	}
	bad := newSpec("bad-1", "bad")
	bad.MaxRetries = new(1) // two failed attempts, one retry, one dead letter
	submit(bad)
	for _, id := range ids {
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := range backlog {
		s := newSpec("queued-"+string(rune('a'+i)), "ok")
		s.Capability, s.Priority = "nobody", new(1)
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"ax_attempts_total", map[string]string{"type": "ok", "outcome": "succeeded"}, n},
		{"ax_attempts_total", map[string]string{"type": "flaky", "outcome": "failed"}, k},
		{"ax_attempts_total", map[string]string{"type": "flaky", "outcome": "succeeded"}, k},
		{"ax_attempts_total", map[string]string{"type": "bad", "outcome": "failed"}, 2},
		{"ax_retries_total", map[string]string{"type": "flaky"}, k},
		{"ax_retries_total", map[string]string{"type": "bad"}, 1},
		{"ax_dead_letters_total", map[string]string{"type": "bad"}, 1},
		{"ax_scheduling_delay_seconds", map[string]string{"priority": "0"}, n},
		{"ax_scheduling_delay_seconds", map[string]string{"priority": "3"}, 2 * k},
		{"ax_submit_to_start_seconds", map[string]string{"priority": "0"}, n},
		{"ax_submit_to_start_seconds", map[string]string{"priority": "3"}, k},
		{"ax_submit_to_finish_seconds", map[string]string{"priority": "0"}, n},
		{"ax_submit_to_finish_seconds", map[string]string{"priority": "3"}, k},
		{"ax_backlog_tasks", map[string]string{"capability": "nobody", "priority": "1"}, backlog},
		{"ax_dead_letters", nil, 1},
		{"ax_executor_attempts_total", map[string]string{"outcome": "succeeded"}, n + k},
		{"ax_executor_attempts_total", map[string]string{"outcome": "failed"}, k + 2},
		{"ax_executor_handler_seconds", nil, n + 2*k + 2},
		{"ax_executor_in_flight_cost", nil, 0},
		{"ax_executor_running_tasks", map[string]string{"capability": "default"}, 0},
		{"ax_executor_capacity", nil, 8},
		{"ax_executor_serving", map[string]string{"capability": "default"}, 1},
		{"ax_consumer_up", map[string]string{"consumer": "ax-orchestrator-submit"}, 1},
		{"ax_consumer_pending_messages", map[string]string{"consumer": "ax-orchestrator-submit"}, 0},
	}
	check := func() (bad []string) {
		for _, w := range want {
			if got := value(t, reg, w.name, w.labels); got != w.value {
				bad = append(bad, w.name+labelString(w.labels)+": got "+ftoa(got)+", want "+ftoa(w.value))
			}
		}
		return bad
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		diff := check()
		if len(diff) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics differ from the workload: %v", diff)
		}
	}
	if age := value(t, reg, "ax_backlog_oldest_seconds", map[string]string{"capability": "nobody", "priority": "1"}); age < 0 {
		t.Fatalf("ax_backlog_oldest_seconds{nobody,1} missing")
	}
	testenv.Eventually(t, 10*time.Second, "the backlog ages", func() bool {
		return value(t, reg, "ax_backlog_oldest_seconds", map[string]string{"capability": "nobody", "priority": "1"}) > 0
	})
	// The queued tasks are looked after by durable timers (their sweep
	// entries share timers, so not necessarily one each).
	testenv.Eventually(t, 10*time.Second, "ax_timers_pending > 0 while tasks are queued", func() bool {
		return value(t, reg, "ax_timers_pending", nil) > 0
	})

	// A pause and a breaker show in the gate series.
	if err := c.Pause(ctx, "ok", false, "metrics test"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "ax_paused{type=ok}", func() bool {
		return value(t, reg, "ax_paused", map[string]string{"type": "ok", "retries_only": "false"}) == 1
	})
}

func labelString(l map[string]string) string {
	s := "{"
	for k, v := range l {
		s += k + "=" + v + ","
	}
	return s + "}"
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
