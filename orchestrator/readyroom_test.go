package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// TestReadyInMemoryParksWhatDoesNotFit: with AX_READY in memory and room
// for 20 dispatches per level, 100 tasks for a capability nobody serves
// yet fill their level and the rest are parked (waiting, a reason naming
// the level) while another capability's task still runs; once an executor
// comes, every parked task is released and all 100 succeed.
func TestReadyInMemoryParksWhatDoesNotFit(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t) // the orchestrator creates AX_READY
	cfg := orchestrator.Config{Topology: orchestrator.TopologyOptions{ReadyInMemory: true, ReadyMaxPerLevel: 20}}
	testenv.Orchestrator(t, srv.URL(), cfg)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	js, _ := jetstream.New(c.Conn())
	ready, err := js.Stream(ctx, subject.StreamReady)
	if err != nil {
		t.Fatal(err)
	}
	if got := ready.CachedInfo().Config; got.Storage != jetstream.MemoryStorage || got.MaxMsgsPerSubject != 20 || !got.DiscardNewPerSubject {
		t.Fatalf("AX_READY: storage %v, per subject %d, discard new per subject %v", got.Storage, got.MaxMsgsPerSubject, got.DiscardNewPerSubject)
	}
	specs := submitFor(t, c, "later", 100, nil)
	level := subject.Ready("later", specs[0].PriorityLevel())
	parked := func() int {
		n := 0
		for _, s := range specs {
			got, err := c.Get(ctx, s.ID)
			if err == nil && got.State == task.Waiting && strings.Contains(got.Reason, "no room for its dispatch in "+level) {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, time.Minute, "80 tasks parked", func() bool { return parked() == 80 })
	info, err := ready.Info(ctx, jetstream.WithSubjectFilter(level))
	if err != nil || info.State.Subjects[level] != 20 {
		t.Fatalf("dispatches stored on %s: %v, %v; want 20", level, info.State.Subjects, err)
	}
	// Another capability is not held up by the full level.
	okExecutorStarted(t, srv.URL())
	other := newSpec("other", "ok")
	if _, err := c.Submit(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, "other"); err != nil || got.State != task.Succeeded {
		t.Fatalf("other: %+v, %v", got, err)
	}
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"later"}}))
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", s.ID, got, err)
		}
	}
}

// TestReadyInMemoryBoundInBytes: the bound in bytes parks what does not fit
// as the bound per level does, and all run once an executor comes.
func TestReadyInMemoryBoundInBytes(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t) // the orchestrator creates AX_READY
	cfg := orchestrator.Config{Topology: orchestrator.TopologyOptions{ReadyInMemory: true, ReadyMaxBytes: 32 << 10}}
	testenv.Orchestrator(t, srv.URL(), cfg)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	specs := submitFor(t, c, "big", 60, map[string]string{"pad": strings.Repeat("x", 1024)})
	testenv.Eventually(t, time.Minute, "a task parked for want of bytes", func() bool {
		for _, s := range specs {
			got, err := c.Get(ctx, s.ID)
			if err == nil && got.State == task.Waiting && strings.Contains(got.Reason, "maximum bytes exceeded") {
				return true
			}
		}
		return false
	})
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"big"}}))
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", s.ID, got, err)
		}
	}
}

// TestReadyInMemoryRecreatedWhenGone: an in-memory AX_READY is gone after
// its server restarts; the orchestrator creates it again and fires the
// reconciler's looks at once, which dispatch again, a run grace after the
// stream's return, the ready tasks whose dispatches went with it. The
// reconciler's own schedule is an hour away here: only the looks fired on
// recreation can finish the test.
func TestReadyInMemoryRecreatedWhenGone(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t) // the orchestrator creates AX_READY
	cfg := orchestrator.Config{ReconcileInterval: time.Hour, ReconcileMaxInterval: time.Hour, RunGrace: 2 * time.Second}
	cfg.Topology.ReadyInMemory = true
	testenv.Orchestrator(t, srv.URL(), cfg)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	specs := submitFor(t, c, "gone", 10, nil)
	js, _ := jetstream.New(c.Conn())
	level := subject.Ready("gone", specs[0].PriorityLevel())
	testenv.Eventually(t, 30*time.Second, "the dispatches stored", func() bool {
		st, err := js.Stream(ctx, subject.StreamReady)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(level))
		return err == nil && info.State.Subjects[level] == uint64(len(specs))
	})
	if err := js.DeleteStream(ctx, subject.StreamReady); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "AX_READY created again", func() bool {
		st, err := js.Stream(ctx, subject.StreamReady)
		return err == nil && st.CachedInfo().Config.Storage == jetstream.MemoryStorage
	})
	testenv.Start(t, okExecutor(t, srv.URL(), executor.Config{Capabilities: []string{"gone"}}))
	for _, s := range specs {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v, %v", s.ID, got, err)
		}
	}
}

// submitFor submits n "ok" tasks for capability, ids <capability>-<i>,
// with payload (nil: none).
func submitFor(t *testing.T, c *sdk.Client, capability string, n int, payload any) []task.Spec {
	t.Helper()
	specs := make([]task.Spec, n)
	for i := range specs {
		s, err := task.New("ok", payload)
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.Capability = fmt.Sprintf("%s-%03d", capability, i), capability
		specs[i] = s
	}
	if _, err := c.SubmitMany(testenv.Context(t, time.Minute), specs); err != nil {
		t.Fatal(err)
	}
	return specs
}
