package task

import "encoding/json"

// Input is one upstream of a task (an id in its depends_on) as the task's
// handler, the SDK and `ax status` see it: how it ended and, when it
// succeeded, its result — inline up to InlineResultLimit, otherwise a
// reference into an object store (ResultBucket), exactly as in the
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
	// ResultObject names a larger result in the object store ResultBucket.
	ResultObject string `json:"result_object,omitempty"`
	// Reason explains the upstream's state (why it failed, was
	// cancelled…).
	Reason string `json:"reason,omitempty"`
	// ResultBucket is the object store holding ResultObject (the
	// upstream's capability's; empty: the legacy AX_OBJECTS).
	ResultBucket string `json:"result_bucket,omitempty"`
	// ResultDigest is ResultObject's SHA-256 as recorded in the upstream's
	// record; a read checks the object against it (empty: unchecked).
	ResultDigest string `json:"result_digest,omitempty"`
}

// InputOf returns t as an input of its dependents.
func InputOf(t Task) Input {
	return Input{ID: t.ID, State: t.State, Result: t.Result, ResultObject: t.ResultObject, Reason: t.Reason,
		ResultBucket: t.ResultBucket, ResultDigest: t.ResultDigest}
}
