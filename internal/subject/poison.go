package subject

import "strconv"

// Poison messages: a message an orchestrator consumer could not apply after
// its delivery limit is kept on ax.poison.<consumer>.<stream sequence>, with
// its original subject and the last error in headers, until an operator
// re-drives it (`ax poison`).
const (
	StreamPoison = "AX_POISON"
	PoisonAll    = "ax.poison.>"
	poisonPrefix = "ax.poison."

	// HeaderPoisonSubject is the subject the poisoned message was on.
	HeaderPoisonSubject = "Ax-Poison-Subject"
	// HeaderPoisonReason is the last error applying it.
	HeaderPoisonReason = "Ax-Poison-Reason"
	// HeaderPoisonDeliveries is how often it was delivered.
	HeaderPoisonDeliveries = "Ax-Poison-Deliveries"
)

// Poison is where a consumer's poisoned message with a stream sequence is kept.
func Poison(consumer string, seq uint64) string {
	return poisonPrefix + consumer + "." + strconv.FormatUint(seq, 10)
}
