// Package exectrace traces an executor's attempts with OpenTelemetry
// through its AttemptHook: each attempt runs in an ax.attempt span that
// continues its task's trace (the producer's, carried by the dispatch's
// traceparent header), and the handler's ctx carries that span, so the
// handler's own spans nest under it.
//
//	ex, _ := executor.New(nc, executor.Config{Hooks: []executor.AttemptHook{exectrace.Hook(tp)}})
//
// A program that wants no tracing does not link this package.
package exectrace

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/tracing"
	"github.com/ax-run/ax/task"
)

// Hook returns an AttemptHook that runs each attempt in an ax.attempt span
// from tp (nil: the global provider).
func Hook(tp trace.TracerProvider) executor.AttemptHook {
	tracer := tracing.Tracer(tp)
	return func(ctx context.Context, job *executor.Job, run func(ctx context.Context) error) error {
		t := task.Task{Spec: task.Spec{ID: job.ID, Type: job.Type, Priority: new(job.Priority), Capability: job.Capability},
			Attempt: job.Attempt, ExecutionID: job.ExecutionID}
		ctx, span := tracer.Start(tracing.Remote(ctx, job.TraceParent), tracing.SpanAttempt,
			trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(tracing.TaskAttributes(t)...))
		defer span.End()
		err := run(ctx)
		var snooze *executor.SnoozeError
		switch {
		case errors.As(err, &snooze):
			// A snooze is no failure: the attempt runs again later.
			span.AddEvent("snoozed", trace.WithAttributes(attribute.String("ax.snooze_delay", snooze.Delay.String())))
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	}
}
