// Package executor runs AX task handlers: an Executor pulls the ready
// tasks of its capabilities (by priority, within its capacity), checks
// each is still due (a leader read: a task cancelled or dispatched again
// while queued is not run), runs its handler with the task's timeout,
// keeps its lease alive with heartbeats and reports the outcome to the
// orchestrator. Executors never write task records: takeovers of
// redelivered dispatches and the running mark of long attempts are
// claimed through the orchestrator, so an executor needs no right to
// write any record. Tasks are submitted with package sdk; the orchestrator
// decides retries, dependencies and dead letters.
//
// # Handlers
//
// Register a Handler (or a function) per task type: Handle, HandleFunc,
// HandleTyped (payload decoded into a Go type), HandleArgs (River-style
// payload types that name their task type, see task.Args) and
// HandleShards (map → shards → reduce). With Config.Codec set (package
// codec), a job's Payload arrives decoded: producers encrypt, the
// orchestrator never sees it in clear.
//
// # Durable steps and sleeps
//
// Job.Step (and the typed Step) runs a piece of a handler once per task:
// its result is stored in the task's record by the orchestrator before
// Step returns it, and later attempts (a retry, a take-over after this
// executor died, a re-drive, the run after a sleep) return the stored
// result without running it. A step's fn runs at least once, and once
// its result is stored it never runs again for that task; if the executor
// dies between fn's return and the store's acknowledgement, fn runs again.
// Job.Sleep returns a *SleepError for the handler to return: the attempt
// ends without spending one, the executor's capacity is free, and the
// handler runs again after the sleep, its stored steps skipped.
//
// # Outcomes
//
// A handler's error decides what happens next, found with errors.As (so
// wrapping with %w is fine, and tests can assert them):
//
//   - nil: the task succeeded with the returned result.
//   - a plain error: the attempt failed; it is retried with backoff until
//     max_retries, then dead-lettered.
//   - Permanent (*PermanentError): failed at once, no retries.
//   - RetryAfter (*RetryAfterError): failed; the retry starts after the
//     given delay instead of the backoff.
//   - Snooze (*SnoozeError): not a failure; the same attempt runs again
//     after the delay, at most task.MaxSnoozes (100) times per attempt
//     series.
//   - Cancel (*CancelError): the task ends cancelled, with its dependents.
//   - Job.Sleep's *SleepError: not a failure; the same attempt runs again
//     after the sleep (see Durable steps and sleeps).
//
// # Lifecycle
//
// Start is non-blocking and Stop drains: it stops pulling, waits for the
// running handlers and their reports, and returns; if its context ends
// first it cancels the handlers and hands their tasks back to be run
// again elsewhere, without waiting for handlers that ignore cancellation.
// Both are idempotent and an executor can be started again after Stop.
// Handlers run at least once: one whose executor dies is run again.
//
// # Logs and metrics
//
// Config.Logger takes a *slog.Logger; Config.Metrics takes any Metrics
// implementation (package executor/promexec exports to Prometheus), so
// embedding an executor pulls in neither a logging nor a metrics library.
//
// # Example
//
// A complete worker program:
//
//	package main
//
//	import (
//		"context"
//		"errors"
//		"log"
//		"log/slog"
//		"os"
//		"os/signal"
//		"syscall"
//		"time"
//
//		"github.com/nats-io/nats.go"
//
//		"github.com/ax-run/ax/executor"
//	)
//
//	// Email is the payload of email.send tasks.
//	type Email struct {
//		To string `json:"to"`
//	}
//
//	// Kind names Email's task type.
//	func (Email) Kind() string { return "email.send" }
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//		defer stop()
//		nc, err := nats.Connect("nats://127.0.0.1:4222", nats.MaxReconnects(-1))
//		if err != nil {
//			log.Fatal(err)
//		}
//		defer nc.Close()
//
//		ex, err := executor.New(nc, executor.Config{Logger: slog.Default()})
//		if err != nil {
//			log.Fatal(err)
//		}
//		executor.HandleArgs(ex, func(ctx context.Context, job *executor.Job, e Email) (any, error) {
//			if e.To == "" {
//				return nil, executor.Permanent(errors.New("no recipient"))
//			}
//			return "sent to " + e.To, nil
//		})
//		if err := ex.Start(ctx); err != nil {
//			log.Fatal(err)
//		}
//		<-ctx.Done() // SIGTERM
//
//		drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//		defer cancel()
//		if err := ex.Stop(drain); err != nil {
//			log.Print(err) // some tasks were handed back to other executors
//		}
//	}
//
// Test handlers against a real AX in the test process with package axtest.
package executor
