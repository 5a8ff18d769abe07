package bench

import (
	"context"
	"testing"
	"time"
)

// BenchmarkEndToEnd runs b.N no-op tasks through the whole path on an
// embedded server and reports tasks/s and latency percentiles:
//
//	go test ./internal/bench -run - -bench EndToEnd -benchtime 20000x
func BenchmarkEndToEnd(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Tasks: b.N})
	if err != nil {
		b.Fatal(err)
	}
	p := res.Phases[0]
	b.ReportMetric(p.TasksPerSec, "tasks/s")
	b.ReportMetric(float64(p.SubmitToDone.P99.Microseconds())/1000, "p99-done-ms")
}

// TestRunSmall checks the benchmark's own plumbing on a few tasks.
func TestRunSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Tasks: 200, Rate: 200, Duration: time.Second, Delayed: 5, Bare: 500})
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Bare; b == nil || b.Jobs != 500 || b.JobsPerSec <= 0 || b.Workers != BareWorkers {
		t.Fatalf("bare JetStream reference: %+v", b)
	}
	phases := res.Phases
	if len(phases) != 2 || phases[0].Tasks != 200 || phases[1].Tasks != 200 || phases[1].DelayedTasks != 5 {
		t.Fatalf("phases %+v", phases)
	}
	if phases[1].DelayedLateness.Max < 0 || phases[1].DelayedLateness.P50 == 0 {
		t.Fatalf("delayed lateness not measured: %+v", phases[1].DelayedLateness)
	}
	for _, p := range phases {
		if p.SubmitToDone.Max <= 0 || p.SubmitToStart.P50 <= 0 || p.TasksPerSec <= 0 {
			t.Fatalf("phase %s measured nothing: %+v", p.Name, p)
		}
	}
}
