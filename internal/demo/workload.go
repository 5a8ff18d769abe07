package demo

import (
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/task"
)

// Capabilities the demo executors declare, and one that nobody serves.
const (
	CapCPU       = "default"
	CapGPU       = "gpu"
	CapUnserved  = "quantum"
	runSuffixLen = 6
)

// Workload is the demo's tasks: a graph plus independent tasks.
type Workload struct {
	Graph  []task.Spec
	Single []task.Spec
	// Unserved is the id of the task whose capability no executor has.
	Unserved string
}

// All returns every spec of the workload.
func (w Workload) All() []task.Spec {
	return append(append([]task.Spec{}, w.Graph...), w.Single...)
}

// NewWorkload builds the demo workload; run makes its ids unique per run.
func NewWorkload(run string) Workload {
	id := func(name string) string { return run + "-" + name }
	spec := func(name, typ string, prio int, capability string, p Params, deps ...string) task.Spec {
		payload, _ := json.Marshal(p)
		s, _ := task.New(typ, json.RawMessage(payload))
		s.ID, s.Priority, s.Capability = id(name), new(prio), capability
		for _, d := range deps {
			s.DependsOn = append(s.DependsOn, id(d))
		}
		return s
	}
	var w Workload
	// A nightly report pipeline: extract → two transforms (one on a GPU) →
	// load → publish; and a step that depends on a doomed export, which is
	// cancelled when the export lands in the dead-letter queue.
	w.Graph = []task.Spec{
		spec("extract", TypeSleep, 1, CapCPU, Params{Sleep: "600ms", Label: "extract"}),
		spec("transform-a", TypeSleep, 2, CapCPU, Params{Sleep: "800ms", Label: "transform a"}, "extract"),
		spec("transform-b", TypeSleep, 2, CapGPU, Params{Sleep: "1s", Label: "transform b (gpu)"}, "extract"),
		spec("load", TypeFlaky, 1, CapCPU, Params{Sleep: "300ms", FailTimes: 1, Label: "load (fails once)"}, "transform-a", "transform-b"),
		spec("publish", TypeSleep, 0, CapCPU, Params{Sleep: "200ms", Label: "publish"}, "load"),
		spec("export", TypeFail, 3, CapCPU, Params{Sleep: "100ms", Label: "export (always fails)"}, "extract"),
		spec("notify-export", TypeSleep, 3, CapCPU, Params{Sleep: "100ms", Label: "notify after export"}, "export"),
	}
	w.Graph[5].MaxRetries = new(3) // 1s, 2s, 4s (+ jitter), then the dead-letter queue
	// Work on every priority level and both capabilities.
	for prio := 0; prio <= task.MaxPriority; prio++ {
		for k := range 4 {
			capability := CapCPU
			if k == 3 {
				capability = CapGPU
			}
			name := fmt.Sprintf("p%d-%d", prio, k)
			w.Single = append(w.Single, spec(name, TypeSleep, prio, capability, Params{Sleep: fmt.Sprintf("%dms", 150+100*k), Label: name}))
		}
	}
	w.Single = append(w.Single,
		spec("flaky", TypeFlaky, 2, CapCPU, Params{Sleep: "200ms", FailTimes: 2, Label: "fails twice, then succeeds"}),
		spec("quantum", TypeSleep, 2, CapUnserved, Params{Label: "no executor has this capability"}),
	)
	// A sharded job: its planner splits the range into 40 shards, at most 8
	// run at once, and the aggregator adds up their sums.
	split := spec("split", TypeSplit, 2, CapCPU, Params{Shards: 40, Size: 1000, Sleep: "60ms", Label: "sharded job"})
	split.Shardable, split.MaxParallelShards = true, 8
	w.Single = append(w.Single, split)
	w.Unserved = id("quantum")
	return w
}
