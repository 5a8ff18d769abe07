package outbox

import "errors"

// ErrEmpty is returned by EnqueueMany and EnqueueGraph given no specs.
var ErrEmpty = errors.New("no tasks to enqueue")

// ErrRelayStopped is returned by Start on a relay that was stopped.
var ErrRelayStopped = errors.New("relay stopped")
