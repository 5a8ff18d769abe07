package orchestrator

import (
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

// The reconciler's looks back off with the time a task stood still, but a
// sharded parent waiting for its shards is looked at every interval: its
// shards' ends decide on a count faults can leave short, and a look is one
// leader read; and a dependent just registered is first looked at once a
// stream leader cut off by a partition has stepped down.
func TestWatchTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	o := &Orchestrator{cfg: Config{ReconcileInterval: time.Minute, ReconcileMaxInterval: time.Hour,
		RunGrace: time.Minute, Now: func() time.Time { return now }}.withDefaults()}
	still := now.Add(-20 * time.Minute)
	for _, c := range []struct {
		name string
		t    task.Task
		want time.Duration
	}{
		{"a waiting task that stood still 20m", task.Task{State: task.Waiting, UpdatedAt: still}, 20 * time.Minute},
		{"a sharded parent that stood still 20m", task.Task{State: task.Waiting, Phase: task.PhaseShards, UpdatedAt: still}, time.Minute},
		{"a fresh waiting task", task.Task{State: task.Waiting, UpdatedAt: now}, time.Minute},
		{"a dependent just registered", task.Task{Spec: task.Spec{DependsOn: []string{"up"}}, State: task.Waiting, UpdatedAt: now}, dependencyLook},
		{"a dependent at its first look", task.Task{Spec: task.Spec{DependsOn: []string{"up"}}, State: task.Waiting, UpdatedAt: now.Add(-dependencyLook)}, time.Minute},
		{"a task that stood still for days", task.Task{State: task.Waiting, UpdatedAt: now.Add(-72 * time.Hour)}, time.Hour},
	} {
		if got := o.watchTime(c.t).Sub(now); got != c.want {
			t.Errorf("%s: next look in %s, want %s", c.name, got, c.want)
		}
	}
}
