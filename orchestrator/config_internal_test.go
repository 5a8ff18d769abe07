package orchestrator

import (
	"testing"
	"time"

	"github.com/ax-run/ax/internal/breaker"
	"github.com/ax-run/ax/internal/retry"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/task"
)

// TestPublicDefaultsMatchTheImplementation: the documented Default*
// constants are the values the internal packages apply to a zero field.
func TestPublicDefaultsMatchTheImplementation(t *testing.T) {
	c := Config{}.withDefaults()
	if want := (retry.Policy{Base: DefaultRetryBase, Factor: DefaultRetryFactor, Max: DefaultRetryMax, Jitter: DefaultRetryJitter}); c.Retry != want {
		t.Errorf("retry defaults %+v, documented %+v", c.Retry, want)
	}
	if got, want := c.RetryBudget.WithDefaults(), (window.Policy{Limit: DefaultRetryBudgetLimit, Width: DefaultRetryBudgetWidth}); got != want {
		t.Errorf("retry budget defaults %+v, documented %+v", got, want)
	}
	want := breaker.Config{Window: DefaultBreakerWindow, Threshold: DefaultBreakerThreshold, MinVolume: DefaultBreakerMinVolume,
		Cooldown: DefaultBreakerCooldown, Probes: DefaultBreakerProbes, ProbeTimeout: DefaultBreakerProbeTimeout}
	if got := c.Breaker.WithDefaults(); got != want {
		t.Errorf("breaker defaults %+v, documented %+v", got, want)
	}
	if want := (Limits{MaxGraphTasks: task.MaxGraphTasks, MaxDependencies: task.MaxDependencies, MaxShards: task.MaxShards, MaxEventWaitersPerSubject: DefaultMaxEventWaitersPerSubject}); c.Limits != want {
		t.Errorf("limits defaults %+v, documented %+v", c.Limits, want)
	}
	if low := (Config{Limits: Limits{MaxGraphTasks: 1, MaxDependencies: 2, MaxShards: 3, MaxTaskTypes: 4, MaxEventWaitersPerSubject: 5}}).withDefaults(); low.Limits != (Limits{1, 2, 3, 4, 5}) {
		t.Errorf("configured limits changed by defaults: %+v", low.Limits)
	}
	for _, s := range topology.Streams(c.Topology) {
		if s.Duplicates != 0 && s.Duplicates != DefaultDuplicateWindow {
			t.Errorf("stream %s duplicate window %v, documented %v", s.Name, s.Duplicates, DefaultDuplicateWindow)
		}
	}
}

// TestConfigConversionKeepsEveryField: a field set through the public
// types reaches the internal policy unchanged, including per-type budgets.
func TestConfigConversionKeepsEveryField(t *testing.T) {
	c := Config{
		Retry:             RetryPolicy{Base: 3 * time.Second, Factor: 3, Max: time.Hour, Jitter: -1},
		RetryBudget:       RetryBudget{Limit: 7, Width: time.Minute},
		RetryBudgetByType: map[string]RetryBudget{"mail": {Limit: 2, Width: 5 * time.Second}},
		Breaker:           BreakerConfig{Window: time.Hour, Threshold: 0.9, MinVolume: 4, Cooldown: time.Second, Probes: 1, ProbeTimeout: 2 * time.Second},
		Topology:          TopologyOptions{Replicas: 3, AllowFewerReplicas: true, DuplicateWindow: time.Second, TaskHistoryMaxAge: time.Hour},
	}.withDefaults()
	if want := (retry.Policy{Base: 3 * time.Second, Factor: 3, Max: time.Hour, Jitter: 0}); c.Retry != want {
		t.Errorf("retry %+v, want %+v", c.Retry, want)
	}
	if want := (window.Policy{Limit: 7, Width: time.Minute}); c.RetryBudget != want {
		t.Errorf("budget %+v, want %+v", c.RetryBudget, want)
	}
	if want := (window.Policy{Limit: 2, Width: 5 * time.Second}); c.RetryBudgetByType["mail"] != want || len(c.RetryBudgetByType) != 1 {
		t.Errorf("budgets by type %+v, want mail: %+v", c.RetryBudgetByType, want)
	}
	if want := (breaker.Config{Window: time.Hour, Threshold: 0.9, MinVolume: 4, Cooldown: time.Second, Probes: 1, ProbeTimeout: 2 * time.Second}); c.Breaker != want {
		t.Errorf("breaker %+v, want %+v", c.Breaker, want)
	}
	if want := (topology.Options{Replicas: 3, AllowFewerReplicas: true, DuplicateWindow: time.Second, TaskHistoryMaxAge: time.Hour}); c.Topology != want {
		t.Errorf("topology %+v, want %+v", c.Topology, want)
	}
}
