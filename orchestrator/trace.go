package orchestrator

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/tracing"
	"github.com/ax-run/ax/task"
)

// Tracing (see internal/tracing for the spans): a submission continues the
// producer's trace from its traceparent header; the task keeps the
// submission span's context in its record, so its dispatches, retries and
// outcome join that trace, and a dispatch released by another task's end
// links to that end.

// tracedSubmit handles a submission in an ax.submit span.
func (o *Orchestrator) tracedSubmit(ctx context.Context, msg jetstream.Msg) error {
	parent := ""
	if h := msg.Headers(); h != nil {
		parent = h.Get(subject.HeaderTraceParent)
	}
	ctx, span := o.tracer.Start(tracing.Remote(ctx, parent), tracing.SpanSubmit,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(tracing.AttrSubject.String(msg.Subject())))
	defer span.End()
	err := o.handleSubmit(ctx, msg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// traceCreated names a task being created on its submission's span and
// returns the trace context its record keeps.
func traceCreated(ctx context.Context, t task.Task) string {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("task created", trace.WithAttributes(tracing.TaskAttributes(t)...))
	}
	return tracing.TraceParent(ctx)
}

// taskContext returns ctx carrying t's trace as the current span and, when
// ctx's own span is another one (the end of an upstream that released t),
// a link to it.
func taskContext(ctx context.Context, t task.Task) (context.Context, []trace.Link) {
	own := tracing.SpanContext(t.TraceParent)
	if !own.IsValid() {
		return ctx, nil
	}
	var links []trace.Link
	if cur := trace.SpanContextFromContext(ctx); cur.IsValid() && cur.SpanID() != own.SpanID() {
		links = append(links, trace.Link{SpanContext: cur})
	}
	return trace.ContextWithRemoteSpanContext(ctx, own), links
}

// startDispatch starts the ax.dispatch span of t and returns the
// traceparent its dispatch carries as a header: the span's, or the task's
// own when tracing is off.
func (o *Orchestrator) startDispatch(ctx context.Context, t task.Task) (traceParent string, span trace.Span) {
	ctx, links := taskContext(ctx, t)
	ctx, span = o.tracer.Start(ctx, tracing.SpanDispatch, trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...))
	if span.IsRecording() {
		span.SetAttributes(tracing.TaskAttributes(t)...)
	}
	if tp := tracing.TraceParent(ctx); tp != "" {
		return tp, span
	}
	return t.TraceParent, span
}

// tracedOutcome ensures the effects of an attempt's outcome (cur → next) in
// an ax.retry span (a retry scheduled) or an ax.outcome span (the task
// moved on); dependents it releases link to that span.
func (o *Orchestrator) tracedOutcome(ctx context.Context, cur, next task.Task, rev uint64) error {
	name := tracing.SpanOutcome
	if next.State == task.Retrying {
		name = tracing.SpanRetry
	}
	ctx, _ = taskContext(ctx, next)
	ctx, span := o.tracer.Start(ctx, name)
	defer span.End()
	if !span.IsRecording() {
		return o.ensureEffects(ctx, next, rev)
	}
	span.SetAttributes(append(tracing.TaskAttributes(cur), tracing.AttrState.String(string(next.State)))...)
	if next.RetryAt != nil {
		span.SetAttributes(tracing.AttrRetryAt.String(next.RetryAt.Format(time.RFC3339Nano)))
	}
	if next.State == task.Retrying || next.State == task.Failed {
		if n := len(next.Errors); n > 0 {
			span.SetStatus(codes.Error, next.Errors[n-1].Error)
		}
	}
	err := o.ensureEffects(ctx, next, rev)
	if err != nil {
		span.RecordError(err)
	}
	return err
}
