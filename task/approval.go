package task

import "time"

// Approval is an operator's decision on an event task waiting for its
// event (ax approve, sdk.Client.Approve, the console): approved, the task
// succeeds with the Approval as its result, which its dependents read as
// their input; rejected, it fails for good with the error
// "rejected by <by>: <reason>". The record keeps it (Task.Approval).
type Approval struct {
	// Approved is true for an approval, false for a rejection.
	Approved bool `json:"approved"`
	// By is who decided: the command's caller (ax.cmd.as.<caller>…,
	// vouched for by the server) and the name its body gives, as the
	// orchestrator records it ("alice", "operator for console:alice").
	By string `json:"by"`
	// Reason is the operator's reason (may be empty).
	Reason string `json:"reason"`
	// At is when the orchestrator applied it.
	At time.Time `json:"at"`
}

// RejectionError is the error a rejected event task fails with:
// "rejected by <by>: <reason>" (without a reason, "rejected by <by>").
func (a Approval) RejectionError() string {
	s := "rejected"
	if a.By != "" {
		s += " by " + a.By
	}
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}
