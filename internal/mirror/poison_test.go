package mirror

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

// TestUndecodableEventDoesNotBlock: a message the mirror cannot decode is
// logged and skipped; the events after it are mirrored.
func TestUndecodableEventDoesNotBlock(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 20*time.Second)
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subject.TaskEvents("broken"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ev := task.Event{Kind: task.KindTransition, To: task.Ready, At: now, Actor: "test",
		Task: task.Task{Spec: task.Spec{ID: "fine", Type: "x", Capability: "default"}, State: task.Ready, SubmittedAt: now, UpdatedAt: now}}
	data, _ := json.Marshal(ev)
	if _, err := js.Publish(ctx, subject.TaskEvents("fine"), data); err != nil {
		t.Fatal(err)
	}
	_, db := mirrortest.DB(t)
	log, logs := newLog(t)
	m := startMirror(t, srv.URL(), db, fastConfig(log), hooks{})
	testenv.Eventually(t, 10*time.Second, "the valid event mirrored and nothing pending", func() bool {
		l, err := m.Lag(ctx)
		return err == nil && !l.Behind() && count(t, ctx, db, "ax_tasks") == 1 && count(t, ctx, db, "ax_events") == 1
	})
	if !strings.Contains(logs.String(), "undecodable task event skipped") {
		t.Fatalf("no log of the skipped event:\n%s", logs.String())
	}
}

// TestDeletedConsumerIsRecreated: a mirror whose consumer was deleted (by
// hand, or lost) creates it again instead of idling for ever.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	publish := func(id string) {
		t.Helper()
		now := time.Now().UTC()
		ev := task.Event{Kind: task.KindTransition, To: task.Ready, At: now, Actor: "test",
			Task: task.Task{Spec: task.Spec{ID: id, Type: "x", Capability: "default"}, State: task.Ready, SubmittedAt: now, UpdatedAt: now}}
		data, _ := json.Marshal(ev)
		if _, err := js.Publish(ctx, subject.TaskEvents(id), data); err != nil {
			t.Fatal(err)
		}
	}
	publish("before")
	_, db := mirrortest.DB(t)
	log, _ := newLog(t)
	startMirror(t, srv.URL(), db, fastConfig(log), hooks{})
	testenv.Eventually(t, 20*time.Second, "the first event mirrored", func() bool { return count(t, ctx, db, "ax_tasks") == 1 })
	if err := js.DeleteConsumer(ctx, subject.StreamTasks, subject.ConsumerMirror); err != nil {
		t.Fatal(err)
	}
	publish("after")
	testenv.Eventually(t, 45*time.Second, "the event after the deletion mirrored", func() bool { return count(t, ctx, db, "ax_tasks") == 2 })
}
