package cli

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
)

// TestOrchestratorStopsCleanlyAfterItsGrace: an orchestrator that ran
// longer than its stop grace still stops cleanly (exit 0): the grace counts
// from the stop, not from the start.
func TestOrchestratorStopsCleanlyAfterItsGrace(t *testing.T) {
	t.Setenv(envMySQLDSN, "")
	grace := stopGrace
	stopGrace = 2 * time.Second
	t.Cleanup(func() { stopGrace = grace })
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, time.Minute)
	octx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var stderr string
	go func() {
		var code int
		code, _, stderr = runCLI(octx, "--nats", srv.URL(), "--log-level", "error", "orchestrator")
		done <- code
	}()
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the orchestrator's timers consumer", func() bool {
		_, err := js.Consumer(ctx, subject.StreamTimers, subject.ConsumerLooks)
		return err == nil
	})
	time.Sleep(stopGrace + 500*time.Millisecond) // up longer than its grace
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("ax orchestrator stopped with exit %d after running longer than its stop grace: %s", code, stderr)
	}
}
