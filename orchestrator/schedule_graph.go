package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-run/ax/task"
)

// A graph schedule (task.Schedule.Graph) fires a whole pipeline: each
// firing creates the graph with its ids prefixed by the firing's id
// (task.ScheduledGraph), in dependency order, as a submitted graph is
// created (handleGraph). Creation is idempotent, so a firing replayed
// after a crash completes the same set.

// checkScheduleGraph validates a graph schedule's graph against the
// orchestrator's limits and admits its types (createSchedule).
func (o *Orchestrator) checkScheduleGraph(ctx context.Context, s *task.Schedule) error {
	for i := range s.Graph {
		s.Graph[i].Normalize()
	}
	g := task.Graph{Tasks: task.ScheduledGraph(s.Name, s.Graph)}
	if err := o.checkGraph(g); err != nil {
		return fmt.Errorf("%w: schedule %s: graph: %v", errInvalid, s.Name, err)
	}
	sorted, err := g.Sorted(o.cfg.MaxPayload)
	if err != nil {
		return fmt.Errorf("%w: schedule %s: graph: %v", errInvalid, s.Name, err)
	}
	if err := o.admitGraphTypes(ctx, sorted); err != nil {
		var rej errRejected
		if errors.As(err, &rej) {
			return fmt.Errorf("%w: schedule %s: graph: %v", errInvalid, s.Name, rej.reason)
		}
		return err
	}
	return nil
}

// fireGraph creates a graph schedule's firing fireID and returns the id of
// its last task in dependency order (what the overlap policy watches). A
// graph the orchestrator refuses (a limit lowered since) is logged and
// skipped, like a refused template.
func (o *Orchestrator) fireGraph(ctx context.Context, s *task.Schedule, fireID string) (string, error) {
	sorted, err := task.Graph{Tasks: task.ScheduledGraph(fireID, s.Graph)}.Sorted(o.cfg.MaxPayload)
	if err == nil {
		err = o.checkGraph(task.Graph{Tasks: sorted})
	}
	if err == nil {
		err = o.admitGraphTypes(ctx, sorted)
	}
	if err != nil {
		var rej errRejected
		var invalid *task.ValidationError
		if errors.As(err, &rej) || errors.As(err, &invalid) {
			o.log.Warn("scheduled graph refused", "error", err, "schedule", s.Name)
			return "", nil
		}
		return "", err
	}
	inGraph := make(map[string]bool, len(sorted))
	for _, sp := range sorted {
		inGraph[sp.ID] = true
	}
	children := make(map[string][]string)
	for _, sp := range sorted {
		for _, dep := range sp.DependsOn {
			if inGraph[dep] {
				children[dep] = append(children[dep], sp.ID)
			}
		}
	}
	for _, sp := range sorted {
		if err := o.create(ctx, sp, children[sp.ID]); err != nil {
			var rej errRejected
			if errors.As(err, &rej) {
				o.log.Warn("scheduled graph task rejected", "error", err, "schedule", s.Name, "task_id", sp.ID)
				continue
			}
			return "", err
		}
	}
	return sorted[len(sorted)-1].ID, nil
}
