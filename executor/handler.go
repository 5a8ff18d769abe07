package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/task"
)

// Job is one execution attempt of a task, handed to a Handler.
type Job struct {
	// ID is the task's id.
	ID string
	// Type is the task's type, the key its handler is registered under.
	Type string
	// Payload is the task's payload as submitted (JSON), decoded with
	// Config.Codec when one is set; HandleTyped and HandleArgs decode it
	// for the handler.
	Payload json.RawMessage
	// Priority is the task's priority, 0 (highest) to 5.
	Priority int
	// Capability is the capability the task was routed to.
	Capability string
	// Attempt is the 1-based attempt number in the current attempt series.
	Attempt int
	// MaxRetries is how many retries the task has after its first attempt.
	MaxRetries int
	// ExecutionID identifies this dispatch; a rerun gets a new one.
	ExecutionID string
	// EstimatedCost is what the task counts against the executor's capacity.
	EstimatedCost float64
	// Phase is a shardable task's step: "plan" or "aggregate" ("" otherwise).
	Phase string
	// Parent is the sharded task a shard belongs to ("" for other tasks).
	Parent string
	// ShardIndex is a shard's place in its parent's plan.
	ShardIndex int
	// TraceParent is the W3C traceparent of the task's trace (from its
	// dispatch's header, else its record), "" when it has none: an
	// AttemptHook continues the trace from it.
	TraceParent string
	// DependsOn lists the task's upstreams (its spec's depends_on). Read
	// how they ended, and their results, with Inputs, Input and
	// UpstreamResult: nothing is read until the handler asks.
	DependsOn []string

	inputs *jobInputs // nil for a Job not made by an executor
	// progress records a progress report (Progress); nil for a Job not
	// made by an executor.
	progress func(percent float64, message string)
	// steps stores and finds the task's durable steps (Step, Sleep); nil
	// for a Job not made by an executor.
	steps *jobSteps
}

// Handler runs jobs of one task type. The context carries the task's
// execution timeout and is cancelled when the task is cancelled or the
// executor stops. The result is marshalled to JSON and recorded (a
// json.RawMessage or []byte holding valid JSON is recorded as is).
//
// The error decides what happens next: nil succeeds; a plain error is a
// failed attempt, retried with backoff; Permanent, RetryAfter, Snooze and
// Cancel ask for something else (see their types).
type Handler interface {
	Handle(ctx context.Context, job *Job) (result any, err error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job *Job) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) (any, error) { return f(ctx, job) }

// TypedHandlerFunc is a handler whose payload arrives decoded into T.
type TypedHandlerFunc[T any] func(ctx context.Context, job *Job, args T) (any, error)

// Typed returns a Handler that decodes each job's payload (JSON) into a T
// and calls f with it. A payload that does not decode into T is a permanent
// failure: retrying cannot fix it. An empty payload leaves T's zero value.
func Typed[T any](f TypedHandlerFunc[T]) Handler {
	return HandlerFunc(func(ctx context.Context, job *Job) (any, error) {
		var args T
		if len(job.Payload) > 0 {
			if err := json.Unmarshal(job.Payload, &args); err != nil {
				return nil, Permanent(fmt.Errorf("decode payload of %s task %s into %T: %w", job.Type, job.ID, args, err))
			}
		}
		return f(ctx, job, args)
	})
}

// HandleTyped registers f as the handler of taskType, with each job's
// payload decoded into a T (see Typed). It is a function, not a method,
// because Go methods cannot have type parameters.
func HandleTyped[T any](e *Executor, taskType string, f TypedHandlerFunc[T]) {
	e.Handle(taskType, Typed(f))
}

// HandleArgs registers f as the handler of the task type T's Kind names,
// with each job's payload decoded into a T: the River-style pairing of a
// payload type and its task type, checked by the compiler on both sides
// (sdk.SubmitArgs submits a T under the same Kind).
func HandleArgs[T task.Args](e *Executor, f TypedHandlerFunc[T]) {
	var zero T
	e.Handle(zero.Kind(), Typed(f))
}
