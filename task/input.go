package task

import "encoding/json"

// Input is one upstream of a task (an id in its depends_on) as the task's
// handler, the SDK and `ax status` see it: how it ended and, when it
// succeeded, its result — inline up to InlineResultLimit, otherwise a
// reference into the AX_OBJECTS object store, exactly as in the
// upstream's record.
type Input struct {
	// ID is the upstream's id.
	ID string `json:"id"`
	// State is where the upstream is: one of the terminal states once a
	// dependent runs under its trigger rule.
	State State `json:"state"`
	// Result is the upstream's result when it succeeded with at most
	// InlineResultLimit bytes.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultObject names a larger result in the AX_OBJECTS object store.
	ResultObject string `json:"result_object,omitempty"`
	// Reason explains the upstream's state (why it failed, was
	// cancelled…).
	Reason string `json:"reason,omitempty"`
}

// InputOf returns t as an input of its dependents.
func InputOf(t Task) Input {
	return Input{ID: t.ID, State: t.State, Result: t.Result, ResultObject: t.ResultObject, Reason: t.Reason}
}
