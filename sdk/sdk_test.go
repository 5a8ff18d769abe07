package sdk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestReadsLeaveNoConsumers: Wait and History use short-lived consumers and
// remove them, so a client that waits on many tasks does not exhaust the
// server's consumers.
func TestReadsLeaveNoConsumers(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	for i := range 40 {
		s, _ := task.New("ok", nil)
		s.ID = fmt.Sprint("t", i)
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.History(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeadLetters(ctx); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(c.Conn())
	st, _ := js.Stream(ctx, subject.StreamTasks)
	// Besides the executors' ready consumers (one per priority level).
	var left []string
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		if _, _, ready := subject.ParseReadyConsumer(name); !ready {
			left = append(left, name)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) > 2 {
		t.Fatalf("%d consumers left on %s after 80 reads: %v", len(left), subject.StreamTasks, left)
	}
}
