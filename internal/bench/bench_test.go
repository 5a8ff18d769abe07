package bench

import (
	"context"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
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
	res, err := Run(ctx, Config{Tasks: 200, Rate: 200, Duration: time.Second, Delayed: 5, Bare: 500, Loop: 450, LoopWorkers: 7, LoopStreams: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b := res.Bare; b == nil || b.Jobs != 500 || b.JobsPerSec <= 0 || b.Workers != BareWorkers {
		t.Fatalf("bare JetStream reference: %+v", b)
	}
	// 450 jobs over two streams (225 each, 4 and 3 in hand): 3 batches of
	// creation records and at least 57 of final records in one, 3 and
	// at least 75 in the other; a creation and a final record each.
	if l := res.Loop; l == nil || l.Jobs != 450 || l.JobsPerSec <= 0 || l.Workers != 7 || l.Streams != 2 || l.Batches < 3+57+3+75 || l.Stored != 900 || !l.Fenced {
		t.Fatalf("minimal durable loop: %+v", l)
	}
	phases := res.Phases
	if len(phases) != 2 || phases[0].Tasks != 200 || phases[1].Tasks != 200 || phases[1].DelayedTasks != 5 {
		t.Fatalf("phases %+v", phases)
	}
	if phases[1].DelayedLateness.Max < 0 || phases[1].DelayedLateness.P50 == 0 {
		t.Fatalf("delayed lateness not measured: %+v", phases[1].DelayedLateness)
	}
	for _, p := range phases {
		if p.SubmitToDone.Max <= 0 || p.SubmitToStart.P50 <= 0 || p.TasksPerSec <= 0 || p.CPUPerTask <= 0 {
			t.Fatalf("phase %s measured nothing: %+v", p.Name, p)
		}
	}
	if res.PeakRSS < 1<<20 {
		t.Fatalf("peak memory %d bytes", res.PeakRSS)
	}
}

// TestRunTwoOrchestrators runs a tiny bench with two orchestrators sharing
// the consumers: every task must run and succeed exactly once, and both
// orchestrators must have written task records.
func TestRunTwoOrchestrators(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Orchestrators: 2, Tasks: 500, Rate: 300, Duration: time.Second, Delayed: 5, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Orchestrators != 2 || res.Servers != 1 {
		t.Fatalf("result says %d orchestrators over %d servers, want 2 over 1", res.Orchestrators, res.Servers)
	}
	if len(res.Phases) != 2 || res.Phases[0].Tasks != 500 || res.Phases[1].Tasks != 300 || res.Phases[1].DelayedTasks != 5 {
		t.Fatalf("phases %+v", res.Phases)
	}
	writes := make([]float64, 2)
	for _, p := range res.Phases {
		if p.DuplicateStarts != 0 || p.DuplicateSuccesses != 0 {
			t.Errorf("phase %s: %d tasks ran again, %d succeeded again", p.Name, p.DuplicateStarts, p.DuplicateSuccesses)
		}
		w := p.Work
		if len(w.WriteShare) != 2 || w.WritesPerTask <= 0 {
			t.Fatalf("phase %s: work %+v, want two orchestrators' shares of the writes", p.Name, w)
		}
		for i, share := range w.WriteShare {
			writes[i] += share * w.WritesPerTask * float64(p.Tasks+p.DelayedTasks)
		}
		t.Logf("%s: %.2f reads, %.2f writes per task; write shares %.2f; redelivered %v", p.Name, w.ReadsPerTask, w.WritesPerTask, w.WriteShare, w.Redelivered)
	}
	for i, n := range writes {
		if n < 1 {
			t.Errorf("orchestrator %d wrote no task record: the second one did not share the work", i+1)
		}
	}
}

// TestRunKillOrchestrator kills one of two orchestrators during the steady
// phase (its connection closed, as the server sees a kill -9): every task
// must still succeed, once, and the phase must say what the death cost.
func TestRunKillOrchestrator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Orchestrators: 2, Rate: 300, Duration: 2 * time.Second, Delayed: 5,
		KillOrchestrator: 500 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err) // a task not finished would end Run with an error
	}
	if len(res.Phases) != 1 {
		t.Fatalf("phases %+v, want the steady one", res.Phases)
	}
	p := res.Phases[0]
	k := p.Takeover
	if k == nil || k.Orchestrator != "bench-orchestrator-2" || k.After != 500*time.Millisecond {
		t.Fatalf("takeover %+v, want bench-orchestrator-2 killed after 500ms", k)
	}
	if k.Longest != p.SubmitToDone.Max || k.Slow < 0 || k.Slow > p.Tasks {
		t.Errorf("takeover %+v does not match the phase's submit→done %+v of %d tasks", k, p.SubmitToDone, p.Tasks)
	}
	if p.DuplicateSuccesses != 0 {
		t.Errorf("%d tasks succeeded twice", p.DuplicateSuccesses)
	}
	t.Logf("takeover: %d of %d tasks over 1s, the longest %s; write shares %.2f; %d started twice", k.Slow, p.Tasks, k.Longest, p.Work.WriteShare, p.DuplicateStarts)
}
