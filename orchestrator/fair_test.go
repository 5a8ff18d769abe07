package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// fairRun submits 200 tasks of tenant a, then 5 of tenant b, to one
// executor running one at a time, and returns how many of a's had started
// when b's last one started.
func fairRun(t *testing.T, window int, weights ...task.KeyLimit) int {
	t.Helper()
	srv, ex, c := testenv.Stack(t, orchestrator.Config{Retry: fastRetry, FairWindow: window, KeyLimits: weights},
		executor.Config{Capacity: 1})
	var mu sync.Mutex
	started := map[string]int{}
	aWhenBDone := -1
	ex.HandleFunc("job", func(_ context.Context, j *executor.Job) (any, error) {
		tenant, _, _ := strings.Cut(j.ID, "-")
		mu.Lock()
		started[tenant]++
		if tenant == "b" && started["b"] == 5 {
			aWhenBDone = started["a"]
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		return nil, nil
	})
	ctx := testenv.Context(t, 2*time.Minute)
	var specs []task.Spec
	for i := range 200 {
		s := newSpec(fmt.Sprint("a-", i), "job")
		s.FairnessKey = "a"
		specs = append(specs, s)
	}
	if _, err := c.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// b submits once a's backlog is in.
	testenv.Eventually(t, time.Minute, "a's tasks accepted", func() bool {
		got, err := c.Get(ctx, "a-199")
		return err == nil && got.State != ""
	})
	var bs []task.Spec
	for i := range 5 {
		s := newSpec(fmt.Sprint("b-", i), "job")
		s.FairnessKey = "b"
		bs = append(bs, s)
	}
	if _, err := c.SubmitMany(ctx, bs); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(specs, bs...) {
		if got, err := c.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %+v %v", s.ID, got, err)
		}
	}
	// The queued tasks' markers went with their dispatches.
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	testenv.Eventually(t, 30*time.Second, "no fairness marker left", func() bool {
		st, err := js.Stream(ctx, subject.StreamHeld)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.FairQueuedAll))
		return err == nil && len(info.State.Subjects) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	return aWhenBDone
}

// TestFairnessKeysTakeTurns: behind tenant a's backlog, tenant b's tasks
// wait for the window and a few turns, not for a's whole backlog — and
// without fairness they wait for all of it.
func TestFairnessKeysTakeTurns(t *testing.T) {
	t.Parallel()
	fair := fairRun(t, 8)
	// b's 5 tasks go in turn with a's: behind the window (8), a's tasks
	// already dispatched, and one of a's per turn.
	if fair > 40 {
		t.Errorf("with fairness, %d of a's tasks started before b's last one", fair)
	}
	unfair := fairRun(t, -1)
	if unfair < 150 {
		t.Errorf("without fairness, only %d of a's 200 tasks started before b's last one: the test shows nothing", unfair)
	}
	t.Logf("a's tasks started before b's last: %d with fairness, %d without", fair, unfair)
}

// TestFairnessWeights: with weight 4 for tenant a and 1 for b, a gets
// about 4 turns for each of b's while both wait.
func TestFairnessWeights(t *testing.T) {
	t.Parallel()
	weighted := fairRun(t, 8, task.KeyLimit{Key: "a", Weight: 4})
	if weighted > 80 {
		t.Errorf("with weights 4:1, %d of a's tasks started before b's last one", weighted)
	}
	if weighted < 16 {
		t.Errorf("with weights 4:1, only %d of a's tasks started before b's last one: a should get 4 turns to b's 1", weighted)
	}
}
