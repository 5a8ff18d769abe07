package executor_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// signalWriter closes ch once a line written to it contains match.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	match string
	ch    chan struct{}
	done  bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.match) {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}

// TestStalledExecutorDoesNotRunADispatchHandedOn: an executor stalled
// (stopped, swapped out, starved of CPU) after a dispatch was delivered to
// it and before it started it — before its claim, or after it — for longer
// than the ack wait, does not run it when it wakes: the delivery may have
// expired and gone to another executor, which runs it (a first delivery
// runs without a claim; a redelivery's claim takes over an attempt whose
// claimant has no lease yet). The conformance suite's mixed fleet found
// it: a SIGSTOP'd executor ran, after its SIGCONT, tasks another executor
// had already run.
func TestStalledExecutorDoesNotRunADispatchHandedOn(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"pulled", "claimed"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			stalledRunsOnce(t, at)
		})
	}
}

func stalledRunsOnce(t *testing.T, at string) {
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	var mu sync.Mutex
	var ran []string
	handler := func(who string) func(context.Context, *executor.Job) (any, error) {
		return func(context.Context, *executor.Job) (any, error) {
			mu.Lock()
			ran = append(ran, who)
			mu.Unlock()
			return who, nil
		}
	}
	left := &signalWriter{match: "left to its redelivery", ch: make(chan struct{})}
	stalled := testenv.Executor(t, srv.URL(), executor.Config{ID: "stalled", AckWait: time.Second, IdleProbe: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(left, nil))})
	stalling := make(chan struct{})
	var once sync.Once
	executor.SetStall(stalled, func(point string) {
		if point != at {
			return
		}
		once.Do(func() {
			close(stalling)
			time.Sleep(3 * time.Second) // the stall: three ack waits
		})
	})
	stalled.HandleFunc("quick", handler("stalled"))
	testenv.Start(t, stalled)
	if _, err := c.Submit(ctx, spec(t, "quick-1", "quick", 2, "default")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stalling:
	case <-ctx.Done():
		t.Fatal("the dispatch never reached the executor")
	}
	other := testenv.Executor(t, srv.URL(), executor.Config{ID: "other", AckWait: time.Second, IdleProbe: 100 * time.Millisecond})
	other.HandleFunc("quick", handler("other"))
	testenv.Start(t, other)
	got, err := c.Wait(ctx, "quick-1")
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("%+v, %v", got, err)
	}
	select {
	case <-left.ch:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the stalled executor did not leave its stale dispatch to the redelivery (the handler ran on %v)", ran)
	}
	// Anything the stalled executor would do with it, it did before it
	// logged; the handler ran once, on whichever executor claimed the
	// redelivery.
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 {
		t.Fatalf("the handler ran %d times (%v), want once", len(ran), ran)
	}
}
