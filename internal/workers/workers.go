// Package workers reads answers off the workers registry's announcements
// (task.Worker) for the CLI and the console.
package workers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ax-run/ax/task"
)

// Unserved says why no running executor can take a ready task of type typ
// on capability: none serves the capability, or those that do have no
// handler for the type (they pass its dispatch on, spending no attempt).
// It is "" when one of ws handles it.
func Unserved(ws []task.Worker, capability, typ string) string {
	var on []string
	for _, w := range ws {
		if !slices.Contains(w.Capabilities, capability) {
			continue
		}
		if slices.Contains(w.Types, typ) {
			return ""
		}
		on = append(on, w.ID)
	}
	if len(on) == 0 {
		return fmt.Sprintf("no executor serving capability %q is running (the workers registry lists none)", capability)
	}
	const most = 5
	names := strings.Join(on[:min(len(on), most)], ", ")
	if len(on) > most {
		names += fmt.Sprintf(" and %d more", len(on)-most)
	}
	return fmt.Sprintf("no executor handles type %q on capability %q: the %d running there (%s) have no handler for it and pass it on, spending no attempt",
		typ, capability, len(on), names)
}

// Running finds the execution executionID of task taskID among what ws
// run now: the executor running it and the execution, or ok false.
func Running(ws []task.Worker, taskID, executionID string) (executor string, x task.WorkerExecution, ok bool) {
	for _, w := range ws {
		for _, x := range w.Running {
			if x.TaskID == taskID && x.ExecutionID == executionID {
				return w.ID, x, true
			}
		}
	}
	return "", task.WorkerExecution{}, false
}
