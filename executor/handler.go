package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Job is one execution attempt of a task, handed to a Handler.
type Job struct {
	ID            string
	Type          string
	Payload       json.RawMessage
	Priority      int
	Capability    string
	Attempt       int
	MaxRetries    int
	ExecutionID   string
	EstimatedCost float64
	// Phase is a shardable task's step: "plan" or "aggregate" ("" otherwise).
	Phase string
	// Parent and ShardIndex identify a shard of a sharded task.
	Parent     string
	ShardIndex int
	// TraceParent is the W3C traceparent of the task's trace (from its
	// dispatch's header, else its record), "" when it has none: an
	// AttemptHook continues the trace from it.
	TraceParent string
}

// Handler runs jobs of one task type. The context carries the task's
// execution timeout and is cancelled when the task is cancelled or the
// executor stops. The result is marshalled to JSON and recorded.
type Handler interface {
	Handle(ctx context.Context, job *Job) (result any, err error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job *Job) (any, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) (any, error) { return f(ctx, job) }

// permanentError marks a failure that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so the task fails at once, without retries.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err}
}

// retryAfterError asks for the next attempt after a given delay.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.err, e.delay)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so the next attempt starts after d instead of the
// backoff delay. It still counts against max_retries.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{err: err, delay: d}
}
