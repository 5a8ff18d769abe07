package outbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"),
		// nats.go v1.55.0 parks this goroutine for good on some puts (see
		// orchestrator/main_test.go).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// database/sql's connection opener lives until the *sql.DB closes,
		// which t.Cleanup does after the leak check of a failed test.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}
