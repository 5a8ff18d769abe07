// Package conformance holds the conformance suite of AX's wire contract
// (README.md): language-neutral scenarios run by its tests against a real
// server and orchestrator through each language's executor and producer
// processes. Event is the one type an adapter shares with the suite.
package conformance

// Event is what an adapter's behave handler publishes on
// conformance.events.<capability> (README.md): a run's start, end or
// abort, as the handler saw it.
type Event struct {
	Event       string `json:"event"`
	ID          string `json:"id"`
	Attempt     int    `json:"attempt"`
	ExecutionID string `json:"execution_id"`
	Executor    string `json:"executor"`
	Priority    int    `json:"priority"`
	Run         int    `json:"run"`
	Reason      string `json:"reason,omitempty"`
	// AtMS is when the handler started ("started"), as the adapter's
	// clock read it: Unix milliseconds with a fraction. It tells a start
	// before a SIGSTOP whose event was still buffered from one after the
	// SIGCONT.
	AtMS float64 `json:"at_ms,omitempty"`
	// Step names the durable step whose fn ran ("step_ran") or after
	// which the handler blocks ("blocked").
	Step string `json:"step,omitempty"`
}
