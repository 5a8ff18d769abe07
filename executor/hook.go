package executor

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// AttemptHook wraps every attempt's handler call (a planner's and an
// aggregator's too): the place for the metrics, traces or logs a program
// wants, without the executor depending on a library for them (see
// executor/promexec's Hook for Prometheus and executor/exectrace for
// OpenTelemetry). A hook must call run exactly once, with ctx or a
// context derived from it — one carrying a span, say, so the
// handler's own spans nest under it — and return run's error, or wrap it.
// Hooks must be safe for concurrent use. Config.Hooks run in order, the
// first outermost.
type AttemptHook func(ctx context.Context, job *Job, run func(ctx context.Context) error) error

// hooked runs run through the configured hooks. A panic in the handler is
// turned into run's error, so every hook sees the attempt end.
func (e *Executor) hooked(ctx context.Context, job *Job, run func(ctx context.Context) error) error {
	safe := func(ctx context.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("handler panicked: %v", p)
			}
		}()
		return run(ctx)
	}
	next := safe
	for i := len(e.cfg.Hooks) - 1; i >= 0; i-- {
		h, inner := e.cfg.Hooks[i], next
		next = func(ctx context.Context) error { return h(ctx, job, inner) }
	}
	return e.registry.track(ctx, job, next) // listed as running meanwhile (registry.go)
}

// Capacity returns the executor's capacity in cost units.
func (e *Executor) Capacity() float64 { return e.cfg.Capacity }

// Capabilities returns the capabilities the executor serves.
func (e *Executor) Capabilities() []string { return append([]string(nil), e.cfg.Capabilities...) }

// traceParentOf is the trace context of an attempt: its dispatch's
// traceparent header, else the one kept in the task's record.
func traceParentOf(msg jetstream.Msg, t task.Task) string {
	if h := msg.Headers(); h != nil {
		if tp := h.Get(subject.HeaderTraceParent); tp != "" {
			return tp
		}
	}
	return t.TraceParent
}
