package executor

// SetStall stalls e's runs of dispatches with f, at "pulled" (before the
// claim) and "claimed" (after it, before the handler starts); set before
// Start.
func SetStall(e *Executor, f func(at string)) { e.stall = f }
