// Package tracing carries OpenTelemetry trace context through AX: a W3C
// traceparent from a producer's context onto its submission (a NATS
// header), into the task's record, onto each dispatch, and into the span
// of every attempt. It also names AX's spans and their attributes.
//
// Spans of one task, all in its producer's trace:
//
//	<producer's span>
//	└─ ax.submit (orchestrator, consumer)             the submission applied
//	   ├─ ax.dispatch (orchestrator, producer)        one per dispatch; links to the span that released it
//	   │  └─ ax.attempt (executor, consumer)          the handler; its ctx carries this span
//	   ├─ ax.retry (orchestrator)                     a failed attempt scheduled for retry
//	   └─ ax.outcome (orchestrator)                   the task ended; dependents it releases link here
//
// With no tracer provider configured (the global no-op default), spans
// cost nothing, and a producer's traceparent is still kept and passed on,
// so executors that trace continue its trace.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// ScopeName is the instrumentation scope of AX's spans.
const ScopeName = "github.com/ax-run/ax"

// Span names.
const (
	SpanSubmit   = "ax.submit"
	SpanDispatch = "ax.dispatch"
	SpanAttempt  = "ax.attempt"
	SpanRetry    = "ax.retry"
	SpanOutcome  = "ax.outcome"
)

// Attribute keys.
const (
	AttrTaskID      = attribute.Key("ax.task.id")
	AttrTaskType    = attribute.Key("ax.task.type")
	AttrPriority    = attribute.Key("ax.task.priority")
	AttrCapability  = attribute.Key("ax.task.capability")
	AttrAttempt     = attribute.Key("ax.task.attempt")
	AttrExecutionID = attribute.Key("ax.execution_id")
	AttrState       = attribute.Key("ax.task.state")
	AttrRetryAt     = attribute.Key("ax.retry_at")
	AttrSubject     = attribute.Key("messaging.destination.name")
)

var propagator = propagation.TraceContext{}

// Tracer returns AX's tracer from tp (nil: the global provider, a no-op
// unless the program set one).
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

// TraceParent returns the W3C traceparent of ctx's span ("" when it has no
// valid span context).
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get(subject.HeaderTraceParent)
}

// Remote returns ctx carrying the remote span context of a traceparent
// (ctx unchanged when it is empty or invalid).
func Remote(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{subject.HeaderTraceParent: traceParent})
}

// SpanContext is the span context of a traceparent (invalid when empty).
func SpanContext(traceParent string) trace.SpanContext {
	return trace.SpanContextFromContext(Remote(context.Background(), traceParent))
}

// TaskAttributes names a task on a span.
func TaskAttributes(t task.Task) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrTaskID.String(t.ID), AttrTaskType.String(t.Type),
		AttrPriority.Int(t.PriorityLevel()), AttrCapability.String(t.Capability)}
	if t.Attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(t.Attempt))
	}
	if t.ExecutionID != "" {
		attrs = append(attrs, AttrExecutionID.String(t.ExecutionID))
	}
	return attrs
}
