package executor

import (
	"errors"
	"fmt"
	"time"

	"github.com/ax-run/ax/task"
)

// A handler's error decides what happens next. A plain error is a failed
// attempt: the task is retried with backoff until max_retries, then fails
// into the dead-letter queue. The types below ask for something else; wrap
// them with %w freely: the executor finds them with errors.As, and so can a
// test.

// PermanentError is a failure that must not be retried: the task fails at
// once and is dead-lettered. Return one with Permanent.
type PermanentError struct {
	// Err is the failure recorded for the attempt.
	Err error
}

// Error returns Err's message.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the task fails at once, without retries. A nil err
// becomes "permanent failure".
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// RetryAfterError is a failed attempt whose retry starts after Delay
// instead of the backoff delay (a rate limit's Retry-After, say). It still
// counts against max_retries. Return one with RetryAfter.
type RetryAfterError struct {
	// Delay is how long to wait before the next attempt.
	Delay time.Duration
	// Err is the failure recorded for the attempt.
	Err error
}

// Error returns Err's message and the delay.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.Delay)
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err so the next attempt starts after d instead of the
// backoff delay. It still counts against max_retries. A nil err becomes
// "retry requested".
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryAfterError{Delay: d, Err: err}
}

// SnoozeError asks to run the same attempt again after Delay, without
// counting a failure: nothing is recorded in the task's errors and
// max_retries is untouched (River's JobSnooze). A task may snooze at most
// task.MaxSnoozes (100) times per attempt series; a snooze beyond that is a
// failed attempt. While snoozed the task is retrying, with snoozed set.
// Return one with Snooze.
type SnoozeError struct {
	// Delay is how long to wait; 0 or less means at once.
	Delay time.Duration
}

// Error says how long the snooze is.
func (e *SnoozeError) Error() string { return fmt.Sprintf("snooze for %s", e.Delay) }

// Snooze returns an error that runs the attempt again after d without
// counting it as a failure: for work that is not ready yet (an upstream
// file still being written, a slot not open). See SnoozeError for the cap.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: d} }

// CancelError ends the task cancelled, by its handler's decision (the work
// became pointless: its order was withdrawn, say). Nothing is retried or
// dead-lettered; dependents are cancelled as for any cancel. Return one
// with Cancel.
type CancelError struct {
	// Err says why; recorded in the task's reason.
	Err error
}

// Error returns Err's message.
func (e *CancelError) Error() string { return "cancelled by handler: " + e.Err.Error() }

// Unwrap returns Err.
func (e *CancelError) Unwrap() error { return e.Err }

// Cancel wraps err so the task ends cancelled instead of failing. A nil err
// becomes "cancelled".
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled")
	}
	return &CancelError{Err: err}
}

// setOutcome records a handler's error in its report. When several outcome
// types are wrapped in one error, the first found in this order wins:
// cancel, sleep, snooze, permanent, retry-after.
func setOutcome(r *task.Report, herr error) {
	var (
		cancel *CancelError
		sleep  *SleepError
		snooze *SnoozeError
		perm   *PermanentError
		ra     *RetryAfterError
	)
	switch {
	case errors.As(herr, &cancel):
		r.Status, r.Error = task.OutcomeCancelled, task.TruncateError(cancel.Err.Error())
	case errors.As(herr, &sleep):
		r.Status, r.Step = task.OutcomeSleeping, sleep.Name
		d := task.Duration(max(sleep.Delay, 0))
		r.RetryAfter = &d
	case errors.As(herr, &snooze):
		r.Status = task.OutcomeSnoozed
		d := task.Duration(max(snooze.Delay, 0))
		r.RetryAfter = &d
	default:
		r.Status, r.Error = task.OutcomeFailed, task.TruncateError(herr.Error())
		switch {
		case errors.As(herr, &perm):
			r.Permanent = true
		case errors.As(herr, &ra):
			d := task.Duration(ra.Delay)
			r.RetryAfter = &d
		}
	}
}
