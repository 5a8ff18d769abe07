package task

import (
	"fmt"
)

// validateGraph checks a graph schedule: an empty template, ids on every
// spec, dependencies only inside the graph, and the graph valid once its
// ids carry a firing's prefix (so they stay within the id limits).
func (s *Schedule) validateGraph(maxPayload int) error {
	if s.Template.Type != "" || len(s.Template.Payload) > 0 {
		return &ValidationError{"template", "give a template or a graph, not both"}
	}
	inGraph := map[string]bool{}
	for _, g := range s.Graph {
		if g.ID == "" {
			return &ValidationError{"graph", "every task of a scheduled graph needs an id"}
		}
		inGraph[g.ID] = true
	}
	for _, g := range s.Graph {
		for _, d := range g.DependsOn {
			if !inGraph[d] {
				return &ValidationError{"graph", fmt.Sprintf("task %q depends on %q, which is not in the graph", g.ID, d)}
			}
		}
		if g.Delay > 0 || g.RunAt != nil || g.Deadline != nil {
			return &ValidationError{"graph", fmt.Sprintf("task %q: delay, run_at and deadline make no sense on a schedule (use ttl)", g.ID)}
		}
	}
	// The longest fire id: a name and a time with nanoseconds.
	probe := ScheduledGraph(s.Name+"-20060102T150405_999999999Z", s.Graph)
	if _, err := (Graph{Tasks: probe}).Sorted(maxPayload); err != nil {
		return fmt.Errorf("graph: %w", err)
	}
	return nil
}

// ScheduledGraph is the graph a graph schedule's firing creates: each
// spec with the id fireID + "-" + its id, and depends_on renamed the same
// way (fireID is the firing's "<name>-<fire time>", as a template's task
// is named).
func ScheduledGraph(fireID string, graph []Spec) []Spec {
	out := make([]Spec, len(graph))
	for i, g := range graph {
		g.ID = fireID + "-" + g.ID
		if len(g.DependsOn) > 0 {
			deps := make([]string, len(g.DependsOn))
			for k, d := range g.DependsOn {
				deps[k] = fireID + "-" + d
			}
			g.DependsOn = deps
		}
		out[i] = g
	}
	return out
}
