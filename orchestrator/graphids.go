package orchestrator

import (
	"encoding/json"

	"github.com/ax-run/ax/task"
)

// graphIDs returns a graph whose specs hold only the ids found in a graph
// submission that did not decode (a member with a bad field), so each of
// them gets a rejection that can be looked up; none when data is not a
// graph at all.
func graphIDs(data []byte) task.Graph {
	var probe struct {
		Tasks []json.RawMessage `json:"tasks"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return task.Graph{}
	}
	var g task.Graph
	for _, raw := range probe.Tasks {
		var s struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &s) == nil && s.ID != "" {
			g.Tasks = append(g.Tasks, task.Spec{ID: s.ID})
		}
	}
	return g
}
