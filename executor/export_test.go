package executor

// SetStallAfterPull stalls e's pulling goroutine with f after each message
// it pulls, before the message starts; set before Start.
func SetStallAfterPull(e *Executor, f func()) { e.stallAfterPull = f }
