package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
		// See orchestrator's TestMain: a nats.go ObjectStore.Put goroutine.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// Keep-alive connections of httptest clients end after the test.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
