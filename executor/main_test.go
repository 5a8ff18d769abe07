package executor_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ax-run/ax/orchestrator"
)

var fastRetry = orchestrator.RetryPolicy{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
		// nats.go v1.55.0: ObjectStore.Put starts this goroutine on its own
		// JetStream context and, when the put finishes before it runs,
		// clears its channel first; it then waits on a nil channel for
		// good. One parked goroutine per unlucky put, in the library.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
