// Package orchestrator owns every task's state. It consumes submissions,
// attempt reports, fired timers and operator commands from JetStream; moves
// tasks through the state table with compare-and-set writes to their
// histories; releases DAG dependents; dispatches ready tasks onto
// task.ready.<capability>.p<N>; arms durable retry timers; and writes
// dead letters.
//
// Every handler is idempotent. A handler first makes its transition (a CAS
// write that fails harmlessly when the transition was already made; what
// the record becomes is decided by package internal/lifecycle) and then
// ensures the effects of the task's current state (lifecycle.Effects): a
// ready task has its dispatch (one per execution), a retrying task has a
// timer (one schedule per subject), a failed task has a dead letter (one
// per subject), a succeeded task has released its dependents, a failed or
// cancelled task has cancelled them. A message is acknowledged only after
// both, so a crash at any point is repaired by redelivery. Several
// orchestrators may run against the same streams; they share the work.
//
// # Configuration
//
// New takes a Config whose zero value is usable: every field documents its
// default, which its zero value means, and the defaults are the exported
// Default* constants. Retry (RetryPolicy), RetryBudget and
// RetryBudgetByType (RetryBudget), Breaker (BreakerConfig) and Topology
// (TopologyOptions) are policies of the same kind: zero fields take their
// defaults.
//
// # Logs and metrics
//
// Config.Logger takes a *slog.Logger; Config.Metrics takes any Metrics
// implementation (package orchestrator/promorch exports to Prometheus, and
// Gates reads the breakers and pauses at any time), so embedding an
// orchestrator pulls in neither a logging nor a metrics library.
//
// # Example
//
// A complete program that runs an orchestrator against a NATS server with
// JetStream until it is interrupted (the orchestrator creates AX's streams
// at Start; several such processes may run at once):
//
//	package main
//
//	import (
//		"context"
//		"log"
//		"log/slog"
//		"os"
//		"os/signal"
//		"time"
//
//		"github.com/nats-io/nats.go"
//
//		"github.com/ax-run/ax/orchestrator"
//	)
//
//	func main() {
//		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
//		defer stop()
//		nc, err := nats.Connect(nats.DefaultURL)
//		if err != nil {
//			log.Fatal(err)
//		}
//		defer nc.Close()
//		o, err := orchestrator.New(nc, orchestrator.Config{
//			Logger: slog.Default(),
//			// Retries wait 2s, 4s, 8s … (at most 5m), plus up to 50 % jitter.
//			Retry: orchestrator.RetryPolicy{Base: 2 * time.Second, Max: 5 * time.Minute},
//			// At most 10 retries of email.send start per second.
//			RetryBudgetByType: map[string]orchestrator.RetryBudget{"email.send": {Limit: 10}},
//			// Keep a finished task's history for a week.
//			Topology: orchestrator.TopologyOptions{TaskHistoryMaxAge: 7 * 24 * time.Hour},
//		})
//		if err != nil {
//			log.Fatal(err)
//		}
//		if err := o.Start(ctx); err != nil {
//			log.Fatal(err)
//		}
//		<-ctx.Done()
//		// Stop lets the messages in hand finish, for at most 30 seconds;
//		// another orchestrator is redelivered whatever is left.
//		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//		defer cancel()
//		if err := o.Stop(stopCtx); err != nil {
//			log.Fatal(err)
//		}
//	}
package orchestrator
