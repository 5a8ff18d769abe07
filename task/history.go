package task

// HistoryEntry is one event of a task's history with its revision: the
// sequence number of the event in the task stream, which is what a
// compare-and-set transition expects as the task's last revision.
type HistoryEntry struct {
	// Revision is the event's stream sequence; it grows with every event.
	Revision uint64 `json:"revision"`
	// Event is the transition and the full task record after it.
	Event Event `json:"event"`
}
