package task

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MaxGraphTasks bounds the size of one submitted graph.
const MaxGraphTasks = 10000

// DecodeGraph parses a graph strictly and fills each spec's defaults.
func DecodeGraph(data []byte) (Graph, error) {
	var w struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Graph{}, fmt.Errorf("decode graph: %w", describeJSONError(data, err, &w))
	}
	g := Graph{Tasks: make([]Spec, 0, len(w.Tasks))}
	for i, raw := range w.Tasks {
		s, err := DecodeSpec(raw)
		if err != nil {
			return Graph{}, fmt.Errorf("graph task %d: %w", i, err)
		}
		g.Tasks = append(g.Tasks, s)
	}
	return g, nil
}

// Sorted validates the graph's specs and returns them in an order where every
// in-graph upstream comes before its downstream. Dependencies on ids outside
// the graph are left for the caller to resolve. A cycle is an error naming it.
func (g Graph) Sorted(maxPayload int) ([]Spec, error) {
	if len(g.Tasks) == 0 {
		return nil, &ValidationError{"tasks", "graph is empty"}
	}
	if len(g.Tasks) > MaxGraphTasks {
		return nil, &ValidationError{"tasks", fmt.Sprintf("%d tasks exceed the limit of %d", len(g.Tasks), MaxGraphTasks)}
	}
	index := make(map[string]int, len(g.Tasks))
	for i := range g.Tasks {
		s := &g.Tasks[i]
		if err := s.Validate(maxPayload); err != nil {
			return nil, fmt.Errorf("task %q: %w", s.ID, err)
		}
		if _, dup := index[s.ID]; dup {
			return nil, &ValidationError{"tasks", fmt.Sprintf("id %q appears twice", s.ID)}
		}
		index[s.ID] = i
	}
	const (
		unvisited = iota
		visiting
		done
	)
	mark := make([]int, len(g.Tasks))
	out := make([]Spec, 0, len(g.Tasks))
	var path []string
	var visit func(i int) error
	visit = func(i int) error {
		switch mark[i] {
		case done:
			return nil
		case visiting:
			start := 0
			for k, id := range path {
				if id == g.Tasks[i].ID {
					start = k
				}
			}
			cycle := append(append([]string{}, path[start:]...), g.Tasks[i].ID)
			return &ValidationError{"depends_on", "cycle: " + strings.Join(cycle, " -> ")}
		}
		mark[i] = visiting
		path = append(path, g.Tasks[i].ID)
		for _, dep := range g.Tasks[i].DependsOn {
			if j, ok := index[dep]; ok {
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		out = append(out, g.Tasks[i])
		return nil
	}
	for i := range g.Tasks {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
