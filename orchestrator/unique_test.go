package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
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

func uniqueSpec(id, typ, key string, window time.Duration) task.Spec {
	s := newSpec(id, typ)
	s.UniqueKey, s.UniqueWindow = key, task.Duration(window)
	return s
}

// TestUniqueKeys: a second submission with the same unique_key of a type
// inside the window is recorded cancelled as a duplicate of the first and
// never runs — across an orchestrator restart and with two orchestrators
// racing; other keys and other types run; after the window the key is
// free again.
func TestUniqueKeys(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	o1 := testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o1"})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capacity: 16})
	var mu sync.Mutex
	runs := map[string]int{}
	run := func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		runs[j.ID]++
		return nil, nil
	}
	ex.HandleFunc("report", run)
	ex.HandleFunc("other", run)
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 120*time.Second)
	submitWait := func(s task.Spec) *task.Task {
		t.Helper()
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		got, err := c.Wait(ctx, s.ID)
		if err != nil {
			t.Fatalf("%s: %v", s.ID, err)
		}
		return got
	}
	isDuplicate := func(got *task.Task, of string) {
		t.Helper()
		if got.State != task.Cancelled || got.DuplicateOf != of || !strings.HasPrefix(got.Reason, fmt.Sprintf("duplicate of task %s: it holds unique_key", of)) {
			t.Fatalf("%s: %s %q duplicate_of %q; want cancelled as a duplicate of %s", got.ID, got.State, got.Reason, got.DuplicateOf, of)
		}
	}
	if got := submitWait(uniqueSpec("r1", "report", "customer 1", time.Hour)); got.State != task.Succeeded {
		t.Fatalf("r1: %s %q", got.State, got.Reason)
	}
	isDuplicate(submitWait(uniqueSpec("r2", "report", "customer 1", time.Hour)), "r1")
	for _, s := range []task.Spec{uniqueSpec("r3", "report", "customer 2", time.Hour), uniqueSpec("x1", "other", "customer 1", time.Hour)} {
		if got := submitWait(s); got.State != task.Succeeded {
			t.Fatalf("%s: %s %q", s.ID, got.State, got.Reason)
		}
	}
	// The first task submitted again stays what it was.
	if got := submitWait(uniqueSpec("r1", "report", "customer 1", time.Hour)); got.State != task.Succeeded || got.DuplicateOf != "" {
		t.Fatalf("r1 again: %+v", got)
	}

	// A new orchestrator knows the key: it is not held in memory.
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := o1.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o2"})
	isDuplicate(submitWait(uniqueSpec("r4", "report", "customer 1", time.Hour)), "r1")

	// Two orchestrators and 20 submissions racing for one key: one runs.
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{NodeID: "o3"})
	var race []task.Spec
	for i := range 20 {
		race = append(race, uniqueSpec(fmt.Sprintf("race-%02d", i), "report", "race", time.Hour))
	}
	if _, err := c.SubmitMany(ctx, race); err != nil {
		t.Fatal(err)
	}
	var winners []string
	var ended []*task.Task
	for _, s := range race {
		got, err := c.Wait(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		ended = append(ended, got)
		if got.DuplicateOf == "" {
			winners = append(winners, got.ID)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d tasks ran for one key: %v", len(winners), winners)
	}
	for _, got := range ended {
		if got.ID != winners[0] {
			isDuplicate(got, winners[0])
		}
	}

	// A key whose holder took it but crashed before creating its task is
	// still its own when the submission is delivered again.
	js, _ := jetstream.New(c.Conn())
	pre, _ := json.Marshal(map[string]any{"id": "pre", "at": time.Now(), "until": time.Now().Add(time.Hour)})
	if _, err := js.Publish(ctx, subject.Unique("report", "pre-key"), pre, jetstream.WithMsgTTL(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := submitWait(uniqueSpec("pre", "report", "pre-key", time.Hour)); got.State != task.Succeeded {
		t.Fatalf("pre: %s %q", got.State, got.Reason)
	}

	// After its window the key is free again.
	if got := submitWait(uniqueSpec("s1", "report", "short", time.Second)); got.State != task.Succeeded {
		t.Fatalf("s1: %s %q", got.State, got.Reason)
	}
	st, err := js.Stream(ctx, subject.StreamUnique)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the short key's window to end", func() bool {
		_, err := st.GetLastMsgForSubject(ctx, subject.Unique("report", "short"))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	if got := submitWait(uniqueSpec("s2", "report", "short", time.Second)); got.State != task.Succeeded {
		t.Fatalf("s2 after the window: %s %q", got.State, got.Reason)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"r2", "r4"} {
		if runs[id] != 0 {
			t.Errorf("duplicate %s ran", id)
		}
	}
	if runs["r1"] != 1 {
		t.Errorf("r1 ran %d times", runs["r1"])
	}
}
