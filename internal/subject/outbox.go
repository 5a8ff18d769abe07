package subject

import (
	"hash/fnv"
	"strconv"
)

// OutboxNotify is the core NATS subject that wakes the outbox relays
// (outbox.Notify publishes an empty message on it after a commit), so rows
// are relayed at once instead of at the next poll.
const OutboxNotify = "ax.outbox.notify"

// SubmitMsgID is the Nats-Msg-Id of a submission: the task id (for a graph
// "graph-" and its first id) and a hash of the published body, so a retried
// publish of the same submission is de-duplicated by JetStream while a
// corrected spec with the same id is not mistaken for a retry. It is
// deterministic: the outbox relay and the SDK compute the same value for the
// same body.
func SubmitMsgID(id string, body []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(body)
	return id + ":" + strconv.FormatUint(h.Sum64(), 36)
}
