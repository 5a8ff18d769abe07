package orchestrator_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestDirectBatchAppliesEachMessage: a batch direct request of one type's
// submissions is applied message by message, as if each were stored: the
// valid ones create their tasks, an invalid one and one of another type
// than the subject's are rejected (recorded, so applied), and the answer
// has one result per message. A batch that is not one (garbage, a graph
// subject) is refused whole.
func TestDirectBatchAppliesEachMessage(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	c := testenv.Client(t, srv.URL())
	nc := testenv.Conn(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	var msgs []json.RawMessage
	for i := range 40 {
		msgs = append(msgs, json.RawMessage(fmt.Sprintf(`{"id":"batch-%d","type":"work","capability":"nobody"}`, i)))
	}
	msgs = append(msgs,
		json.RawMessage(`{"id":"batch-bad","type":"work","priority":42}`),
		json.RawMessage(`{"id":"batch-other","type":"other.type"}`))
	data, _ := json.Marshal(task.DirectBatch{Messages: msgs})
	reply, err := nc.RequestWithContext(ctx, subject.DirectBatch(subject.Submit("work")), data)
	if err != nil {
		t.Fatal(err)
	}
	var rep task.DirectBatchReply
	if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.Error != "" || len(rep.Results) != len(msgs) {
		t.Fatalf("reply %s (%v)", reply.Data, err)
	}
	for i, r := range rep.Results {
		if r.Error != "" {
			t.Fatalf("message %d not applied: %s", i, r.Error)
		}
	}
	for i := range 40 {
		if got, err := c.Get(ctx, fmt.Sprint("batch-", i)); err != nil || got.State != task.Ready {
			t.Fatalf("batch-%d: %+v %v", i, got, err)
		}
	}
	for _, id := range []string{"batch-bad", "batch-other"} {
		if _, err := c.Wait(ctx, id); err == nil {
			t.Fatalf("%s was created", id)
		}
	}
	for _, bad := range []struct{ subj, body string }{
		{subject.DirectBatch(subject.Submit("work")), `not json`},
		{subject.DirectBatch(subject.GraphSubmit), `{"messages":[{"tasks":[]}]}`},
	} {
		reply, err := nc.RequestWithContext(ctx, bad.subj, []byte(bad.body))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.Error == "" {
			t.Fatalf("%s %s: %s, want it refused whole", bad.subj, bad.body, reply.Data)
		}
	}
}
