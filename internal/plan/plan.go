// Package plan is the design notes' capacity-planning arithmetic (pure):
//
//	backlog            ≈ S × T_wait
//	concurrency needed ≈ S × T_exec
//	executors          = ⌈concurrency × (1 + margin) / slots per executor⌉
//
// where S is new tasks per second, T_wait the time a task waits before it
// runs, T_exec its run time and margin the headroom for peaks (30–50 %).
package plan

import (
	"errors"
	"fmt"
	"math"
)

// DefaultMargins are the peak margins the notes recommend.
var DefaultMargins = []float64{0.3, 0.5}

// Inputs are the figures a plan is made from.
type Inputs struct {
	// Rate is S, new tasks per second.
	Rate float64
	// Wait is T_wait in seconds: how long a task waits before it runs.
	Wait float64
	// Exec is T_exec in seconds: how long a task runs.
	Exec float64
	// Slots is how many tasks one executor runs at once (its capacity in
	// cost units divided by the tasks' mean estimated_cost).
	Slots float64
	// Margins are the peak margins to size for (fractions; default 30 % and 50 %).
	Margins []float64
}

// Plan is what the inputs imply.
type Plan struct {
	Inputs
	// Backlog is S × T_wait: the tasks queued at any moment.
	Backlog float64
	// Concurrency is S × T_exec: the tasks running at any moment.
	Concurrency float64
	// Executors is Concurrency / Slots rounded up: no margin.
	Executors int
	// WithMargin is the executors needed with each margin, in Margins' order.
	WithMargin []int
}

// Make applies the formula.
func Make(in Inputs) (Plan, error) {
	switch {
	case in.Rate < 0 || math.IsNaN(in.Rate):
		return Plan{}, fmt.Errorf("rate %v: must be ≥ 0", in.Rate)
	case in.Wait < 0 || in.Exec < 0:
		return Plan{}, errors.New("wait and exec times must be ≥ 0")
	case in.Slots <= 0:
		return Plan{}, fmt.Errorf("slots per executor %v: must be > 0", in.Slots)
	}
	if len(in.Margins) == 0 {
		in.Margins = DefaultMargins
	}
	p := Plan{Inputs: in, Backlog: in.Rate * in.Wait, Concurrency: in.Rate * in.Exec}
	p.Executors = ceil(p.Concurrency / in.Slots)
	for _, m := range in.Margins {
		p.WithMargin = append(p.WithMargin, ceil(p.Concurrency*(1+m)/in.Slots))
	}
	return p, nil
}

// ceil rounds up, ignoring float noise just above a whole number.
func ceil(x float64) int { return int(math.Ceil(x - 1e-9)) }

// Autoscaling is what a backlog-driven autoscaler of one capability's
// executors (KEDA's Prometheus trigger, deploy/helm/ax) is given, from a
// plan of that capability: the desired executors are the largest of
// backlog / BacklogPerReplica, in hand / InHandPerReplica (both rounded
// up) and the current count scaled by oldest age / OldestSeconds.
type Autoscaling struct {
	// BacklogPerReplica is the ax_backlog_tasks one executor drains within
	// T_wait: its throughput (slots / T_exec) × T_wait, which equals the
	// plan's backlog divided by its executors, so the planned backlog asks
	// for the planned executors.
	BacklogPerReplica float64
	// InHandPerReplica is the ax_dispatches_in_hand one executor holds at
	// most (its slots): executors still running tasks are not removed.
	InHandPerReplica float64
	// OldestSeconds is T_wait: an ax_backlog_oldest_seconds above it adds
	// executors in proportion.
	OldestSeconds float64
	// MinReplicas is 0 (scale to zero when nothing is queued or running);
	// MaxReplicas the executors with the largest margin (at least 1).
	MinReplicas, MaxReplicas int
}

// Autoscaling returns the thresholds matching p.
func (p Plan) Autoscaling() Autoscaling {
	a := Autoscaling{InHandPerReplica: p.Slots, OldestSeconds: p.Wait, MaxReplicas: 1}
	// A handler time of 0 (no-op tasks) is taken as 1 ms: an executor's
	// throughput is finite.
	a.BacklogPerReplica = math.Max(1, math.Ceil(p.Slots/math.Max(p.Exec, 0.001)*p.Wait-1e-9))
	for _, n := range p.WithMargin {
		a.MaxReplicas = max(a.MaxReplicas, n)
	}
	return a
}
