package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

// benchEvents is the size of the backlog the benchmarks mirror.
const benchEvents = 20_000

// syntheticHistories returns benchEvents events of realistic task lives:
// ready → running → succeeded, every fourth task failing once first.
func syntheticHistories(n int) []record {
	start := time.Now().UTC()
	var out []record
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("bench-%06d", i)
		t := task.Task{Spec: task.Spec{ID: id, Type: "bench.work", Priority: new(2), Capability: "default", MaxRetries: new(3)},
			SubmittedAt: start}
		at := start
		emit := func(from, to task.State, actor, reason string) {
			at = at.Add(time.Millisecond)
			t.State, t.UpdatedAt, t.Reason = to, at, reason
			out = append(out, record{Seq: uint64(len(out) + 1), TaskID: id, Event: task.Event{
				Kind: task.KindTransition, From: from, To: to, At: at, Actor: actor, Reason: reason, Task: t}})
		}
		attempts := 1
		if i%4 == 0 {
			attempts = 2
		}
		var from task.State
		for a := 1; a <= attempts; a++ {
			t.Attempt, t.ExecutionID, t.Executor = a, nuid.Next(), ""
			ready := at
			t.ReadyAt, t.StartedAt = &ready, nil
			emit(from, task.Ready, "orchestrator-1", "submitted")
			started := at.Add(time.Millisecond)
			t.StartedAt, t.Executor = &started, "executor-1"
			emit(task.Ready, task.Running, "executor-1", "claimed by executor-1")
			if a < attempts {
				t.Errors = append(t.Errors, task.AttemptError{Attempt: a, ExecutionID: t.ExecutionID, Executor: "executor-1", Error: "connection refused", At: at})
				emit(task.Running, task.Retrying, "orchestrator-1", "attempt failed: connection refused")
				from = task.Retrying
				continue
			}
			fin := at.Add(time.Millisecond)
			t.FinishedAt = &fin
			emit(task.Running, task.Succeeded, "orchestrator-1", "attempt succeeded")
		}
	}
	return out[:n]
}

// BenchmarkMirror measures end-to-end throughput: a backlog of 20,000 task
// events in AX_TASKS (embedded NATS) mirrored into an empty MariaDB
// database with the default batch size. Run it with
//
//	go test -run '^$' -bench Mirror -benchtime 3x ./internal/mirror/
func BenchmarkMirror(b *testing.B) {
	srv := testenv.NATS(b)
	nc := testenv.Conn(b, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		b.Fatal(err)
	}
	for _, r := range syntheticHistories(benchEvents) {
		data, err := json.Marshal(r.Event)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.PublishAsync(subject.TaskEvents(r.TaskID), data); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		b.Fatal("publishing the backlog timed out")
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_, db := mirrortest.DB(b)
		_ = js.DeleteConsumer(ctx, subject.StreamTasks, subject.ConsumerMirror)
		m, err := New(nc, db, Config{Logger: testenv.Logger(b)})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		for {
			l, err := m.Lag(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !l.Behind() && l.Written >= benchEvents {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StopTimer()
		if err := m.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM ax_events").Scan(&n); err != nil || n != benchEvents {
			b.Fatalf("mirrored %d events, %v", n, err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkWriteBatch measures the MySQL side alone: 20,000 events in
// 500-event batches (one transaction each) written into an empty database.
func BenchmarkWriteBatch(b *testing.B) {
	ctx := context.Background()
	recs := syntheticHistories(benchEvents)
	var batches []batch
	for i := 0; i < len(recs); i += DefaultBatch {
		batches = append(batches, buildBatch(recs[i:min(i+DefaultBatch, len(recs))]))
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		_, db := mirrortest.DB(b)
		if _, err := Migrate(ctx, db); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, bt := range batches {
			if err := writeBatch(ctx, db, bt, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(benchEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}
