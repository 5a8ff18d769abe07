package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// rejectInputLimit mirrors how much of a rejected input the orchestrator keeps.
const rejectInputLimit = 4096

// badInput is a raw message the orchestrator must refuse.
type badInput struct {
	name    string
	subject string
	body    []byte
	// ids whose rejection sdk.Client.Get must report; none means the input
	// has no usable id and its rejection is found in AX_REJECTED by input.
	ids []string
	// want are substrings the rejection's reason must contain (any case).
	want []string
}

func badInputs() []badInput {
	big := `{"id":"m-oversized","type":"x","payload":"` + strings.Repeat("A", 300<<10) + `"}`
	deep := `{"id":"m-deep","type":"x","payload":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`
	sub := subject.Submit("x")
	return []badInput{
		// Refused with the id known: the SDK's Get and Wait report them.
		{"priority 9", sub, []byte(`{"id":"m-priority-9","type":"x","priority":9}`), []string{"m-priority-9"}, []string{"priority", "9", "out of range"}},
		{"self dependency", sub, []byte(`{"id":"m-self-dep","type":"x","depends_on":["m-self-dep"]}`), []string{"m-self-dep"}, []string{"depends_on", "itself"}},
		{"oversized payload", sub, []byte(big), []string{"m-oversized"}, []string{"payload", "exceeds"}},
		{"type mismatch", sub, []byte(`{"id":"m-type-mismatch","type":"demo.noop"}`), []string{"m-type-mismatch"}, []string{"demo.noop", "does not match", `"x"`}},
		{"negative max_retries", sub, []byte(`{"id":"m-negative-retries","type":"x","max_retries":-1}`), []string{"m-negative-retries"}, []string{"max_retries", "-1"}},
		{"zero timeout", sub, []byte(`{"id":"m-zero-timeout","type":"x","timeout":"0s"}`), []string{"m-zero-timeout"}, []string{"timeout"}},
		{"bad capability", sub, []byte(`{"id":"m-bad-capability","type":"x","capability":"a.b"}`), []string{"m-bad-capability"}, []string{"capability", "a.b"}},
		{"zero cost", sub, []byte(`{"id":"m-zero-cost","type":"x","estimated_cost":0}`), []string{"m-zero-cost"}, []string{"estimated_cost"}},
		// No usable id: found in AX_REJECTED by their input.
		{"invalid JSON", sub, []byte(`{"id": "m-truncated", "type": `), nil, []string{"decode task spec"}},
		{"not an object", sub, []byte(`[1,2,3]`), nil, []string{"decode task spec", "array"}},
		{"binary garbage", sub, []byte("\xff\xfe\x00\x01garbage"), nil, []string{"invalid character"}},
		{"empty body", sub, nil, nil, []string{"EOF"}},
		{"invalid id", sub, []byte(`{"id":"bad id!","type":"x"}`), nil, []string{"id", "bad id!"}},
		{"deep nesting", sub, []byte(deep), nil, []string{"depth"}},
		// Graphs on task.graph.submit: all of a graph is refused.
		{"graph cycle", subject.GraphSubmit, []byte(`{"tasks":[
			{"id":"m-cycle-a","type":"demo.noop","depends_on":["m-cycle-c"]},
			{"id":"m-cycle-b","type":"demo.noop","depends_on":["m-cycle-a"]},
			{"id":"m-cycle-c","type":"demo.noop","depends_on":["m-cycle-b"]}]}`),
			[]string{"m-cycle-a", "m-cycle-b", "m-cycle-c"}, []string{"graph rejected", "cycle", "m-cycle-a -> m-cycle-c -> m-cycle-b -> m-cycle-a"}},
		{"graph task with empty type", subject.GraphSubmit, []byte(`{"tasks":[
			{"id":"m-gtype-a","type":"demo.noop"},
			{"id":"m-gtype-b","type":"","depends_on":["m-gtype-a"]}]}`),
			[]string{"m-gtype-a", "m-gtype-b"}, []string{"graph rejected", "m-gtype-b", "type", "empty"}},
		{"graph with duplicate id", subject.GraphSubmit, []byte(`{"tasks":[
			{"id":"m-gdup-a","type":"demo.noop"},
			{"id":"m-gdup-a","type":"demo.noop"}]}`),
			[]string{"m-gdup-a"}, []string{"graph rejected", "appears twice"}},
		{"graph task with a bad duration", subject.GraphSubmit, []byte(`{"tasks":[
			{"id":"m-gdur-a","type":"demo.noop"},
			{"id":"m-gdur-b","type":"demo.noop","timeout":"0s","depends_on":["m-gdur-a"]}]}`),
			[]string{"m-gdur-a", "m-gdur-b"}, []string{"graph rejected", "graph task 1", "timeout"}},
		{"graph invalid JSON", subject.GraphSubmit, []byte(`{"tasks":[{"id":"m-gjson-a",`), nil, []string{"decode graph"}},
		{"empty graph", subject.GraphSubmit, []byte(`{"tasks":[]}`), nil, []string{"graph is empty"}},
	}
}

// TestMalformedInput publishes garbage straight to the orchestrator's
// streams: every bad submission is rejected with a reason, nothing is
// redelivered forever, a valid task still runs afterwards and the
// orchestrator process stays up.
func TestMalformedInput(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	orch := c.startOrchestrator("orch-1")
	c.startWorker("worker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	inputs := badInputs()
	for _, in := range inputs {
		if _, err := js.Publish(ctx, in.subject, in.body); err != nil {
			t.Fatalf("publish %s: %v", in.name, err)
		}
	}
	// Garbage on the other streams the orchestrator consumes is dropped.
	for i, g := range []struct{ subj, body string }{
		{subject.Completed("demo.noop"), `not json`},
		{subject.Completed("demo.noop"), `{"id":"m-ghost","execution_id":"e1","status":"succeeded"}`},
		{subject.Completed("demo.noop"), `{"id":"m-ghost","execution_id":"e1","status":"exploded"}`},
		{subject.Completed("demo.noop"), `{"id":"","execution_id":""}`},
		{subject.Fire(subject.TimerRetry, "m-ghost-1"), `garbage`},
		{subject.Fire(subject.TimerRetry, "m-ghost-2"), `{"id":"m-ghost-2","kind":"retry","attempt":1}`},
		{subject.Fire(subject.TimerRetry, "m-ghost-3"), `{"id":"m-ghost-3","kind":"bogus","attempt":1}`},
	} {
		if _, err := js.Publish(ctx, g.subj, []byte(g.body)); err != nil {
			t.Fatalf("publish garbage %d on %s: %v", i, g.subj, err)
		}
	}
	var anonymous []badInput
	for _, in := range inputs {
		if len(in.ids) == 0 {
			anonymous = append(anonymous, in)
			continue
		}
		for _, id := range in.ids {
			var rej *sdk.RejectedError
			eventually(t, 30*time.Second, "rejection of "+id+" ("+in.name+")", func() (bool, string) {
				got, err := cl.Get(ctx, id)
				if got != nil {
					t.Fatalf("%s: task %s was created (%s: %s) although its submission must be refused",
						in.name, id, got.State, got.Reason)
				}
				if errors.As(err, &rej) {
					return true, ""
				}
				return false, fmt.Sprint(err)
			})
			checkRejection(t, in, rej.Rejection)
			if rej.Rejection.ID != id {
				t.Errorf("%s: rejection of %s has id %q", in.name, id, rej.Rejection.ID)
			}
		}
	}
	eventually(t, 30*time.Second, "the anonymous rejections", func() (bool, string) {
		rs, err := rejections(ctx, js)
		if err != nil {
			return false, err.Error()
		}
		var missing []string
		for _, in := range anonymous {
			i := slices.IndexFunc(rs, func(r task.Rejection) bool {
				return r.ID == "" && r.Subject == in.subject && r.Input == keptInput(in.body)
			})
			if i < 0 {
				missing = append(missing, in.name)
				continue
			}
			if !hasAll(rs[i].Reason, in.want) {
				return true, "" // reported below
			}
		}
		return len(missing) == 0, fmt.Sprintf("no rejection yet for %v", missing)
	})
	rs, err := rejections(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range anonymous {
		i := slices.IndexFunc(rs, func(r task.Rejection) bool {
			return r.ID == "" && r.Subject == in.subject && r.Input == keptInput(in.body)
		})
		if i < 0 {
			t.Errorf("%s: no anonymous rejection", in.name)
			continue
		}
		checkRejection(t, in, rs[i])
	}

	// Nothing is stuck: every message the orchestrator consumes was acked.
	for _, cons := range []struct{ stream, name string }{
		{subject.StreamSubmit, subject.ConsumerSubmit},
		{subject.StreamCompleted, subject.ConsumerCompleted},
		{subject.StreamTimers, subject.ConsumerTimers},
		{subject.StreamTimers, subject.ConsumerLooks},
		{subject.StreamCommands, subject.ConsumerCommands},
	} {
		waitDrained(t, ctx, js, cons.stream, cons.name, 2*time.Minute, "consumer "+cons.name+" to ack everything")
	}

	// A valid task still runs.
	s, err := task.New(demo.TypeNoop, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.ID = "m-valid-after"
	if _, err := cl.Submit(ctx, s); err != nil {
		t.Fatal(err)
	}
	got, err := cl.Wait(ctx, s.ID)
	if err != nil || got.State != task.Succeeded {
		t.Fatalf("valid task after the garbage: %+v, %v", got, err)
	}
	if !orch.alive() {
		t.Fatalf("the orchestrator died: %v", orch.cur.err)
	}
}

// TestMalformedCommands: an operator command that cannot be carried out
// (bad body, unknown kind, no task id, unknown task) is answered with an
// error and acknowledged, not retried forever.
func TestMalformedCommands(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, _ := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	orch := c.startOrchestrator("orch-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmds := []struct{ subj, body, want string }{
		{"ax.cmd.cancel.m-ghost", `{not json`, "malformed command"},
		{"ax.cmd.redrive.m-ghost", `{"reason":"x"}`, "not found"},
		{"ax.cmd.cancel.m-ghost", ``, "not found"},
		{"ax.cmd.explode.m-ghost", `{}`, "unknown command"},
		{"ax.cmd.cancel", `{}`, "malformed command subject"},
	}
	replies := make([]*nats.Subscription, len(cmds))
	for i, cmd := range cmds {
		replies[i] = sendCommand(t, ctx, nc, js, cmd.subj, cmd.body)
	}
	deadline, cancelReplies := context.WithTimeout(ctx, 10*time.Second)
	defer cancelReplies()
	for i, cmd := range cmds {
		t.Run(cmd.subj+" "+cmd.body, func(t *testing.T) {
			rep, ok := awaitReply(t, deadline, replies[i])
			if ok && (rep.OK || !strings.Contains(rep.Error, cmd.want)) {
				t.Errorf("reply %+v, want an error containing %q", rep, cmd.want)
			}
		})
	}
	waitDrained(t, ctx, js, subject.StreamCommands, subject.ConsumerCommands, 2*time.Minute, "every command to be acknowledged")
	if !orch.alive() {
		t.Fatalf("the orchestrator died: %v", orch.cur.err)
	}
}

// TestMalformedDispatch publishes garbage on dispatch subjects, the
// executors' input: a worker drops it (no retry loop) and lives on.
func TestMalformedDispatch(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.startOrchestrator("orch-1")
	worker := c.startWorker("worker-1")
	warmUp(t, cl, task.DefaultCapability)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Dispatches nobody but an orchestrator may write in a secured
	// deployment (deploy/security), here written by hand: garbage, and
	// records that are not ready ones. The worker drops them and lives on.
	for id, body := range map[string]string{
		"ghost-1": `garbage`,
		"ghost-2": `{"id":"ghost-2","execution_id":"x2"}`,
		"ghost-3": `{"kind":"transition","to":"ready","task":{"id":"ghost-3","type":"demo.noop","state":"waiting"}}`,
		"ghost-4": `{"kind":"transition","to":"ready","task":{"id":"ghost-4","type":"demo.other","state":"ready","execution_id":"x4"}}`,
	} {
		if _, err := js.Publish(ctx, subject.TaskDispatch(id, task.DefaultCapability, 2, demo.TypeNoop), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, ctx, js, subject.StreamTasks, subject.ReadyConsumer(task.DefaultCapability, 2), 2*time.Minute,
		"the garbage dispatches to be dropped (a worker that retries them forever never drains)")
	if !worker.alive() {
		t.Fatalf("the worker died: %v", worker.cur.err)
	}
}

// TestUndecodableSpecRejectedByID: a raw submission whose body has an id
// but a field of the wrong type, an unknown field, a bad duration or
// trailing data is refused; the refusal must be found under that id, or a
// producer waiting on its id (sdk.Client.Wait) never learns why its task
// does not exist.
func TestUndecodableSpecRejectedByID(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.startOrchestrator("orch-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sub := subject.Submit("x")
	inputs := []badInput{
		{"wrong field types", sub, []byte(`{"id":"m-wrong-types","type":"x","priority":"high"}`), []string{"m-wrong-types"}, []string{"priority"}},
		{"unknown field", sub, []byte(`{"id":"m-unknown-field","type":"x","colour":"red"}`), []string{"m-unknown-field"}, []string{"colour"}},
		{"bad duration", sub, []byte(`{"id":"m-bad-timeout","type":"x","timeout":"forever"}`), []string{"m-bad-timeout"}, []string{"forever"}},
		{"trailing data", sub, []byte(`{"id":"m-trailing","type":"x"} {"id":"m-trailing-2"}`), []string{"m-trailing"}, []string{"trailing"}},
	}
	for _, in := range inputs {
		if _, err := js.Publish(ctx, in.subject, in.body); err != nil {
			t.Fatalf("publish %s: %v", in.name, err)
		}
	}
	// Wait until the orchestrator has handled them all.
	eventually(t, 30*time.Second, "the submissions to be handled", func() (bool, string) {
		info, err := js.Consumer(ctx, subject.StreamSubmit, subject.ConsumerSubmit)
		if err != nil {
			return false, err.Error()
		}
		ci := info.CachedInfo()
		return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= uint64(len(inputs)),
			fmt.Sprintf("%+v", ci.AckFloor)
	})
	rs, err := rejections(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		id := in.ids[0]
		t.Run(in.name, func(t *testing.T) {
			var rej *sdk.RejectedError
			_, err := cl.Get(ctx, id)
			if !errors.As(err, &rej) {
				where := "nowhere"
				if i := slices.IndexFunc(rs, func(r task.Rejection) bool { return r.Input == keptInput(in.body) }); i >= 0 {
					where = fmt.Sprintf("only anonymously (id %q, reason %q)", rs[i].ID, rs[i].Reason)
				}
				t.Fatalf("Get(%s) = %v; the rejection is recorded %s", id, err, where)
			}
			checkRejection(t, in, rej.Rejection)
		})
	}
}

// TestGraphAllOrNothing: a graph whose second task is invalid is refused as
// a whole (SubmitGraph: "creates all of it or rejects all of it"); its first
// task must not be created and run.
func TestGraphAllOrNothing(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.startOrchestrator("orch-1")
	c.startWorker("worker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	in := badInput{"graph with an invalid second task", subject.GraphSubmit, []byte(`{"tasks":[
		{"id":"m-gdep-a","type":"demo.noop"},
		{"id":"m-gdep-b","type":"demo.noop","priority":9,"depends_on":["m-gdep-a"]}]}`),
		[]string{"m-gdep-a", "m-gdep-b"}, []string{"graph rejected", "priority", "out of range"}}
	ack, err := js.Publish(ctx, in.subject, in.body)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the graph to be handled", func() (bool, string) {
		info, err := js.Consumer(ctx, subject.StreamSubmit, subject.ConsumerSubmit)
		if err != nil {
			return false, err.Error()
		}
		ci := info.CachedInfo()
		return ci.AckFloor.Stream >= ack.Sequence && ci.NumAckPending == 0, fmt.Sprintf("%+v", ci.AckFloor)
	})
	for _, id := range in.ids {
		got, err := cl.Get(ctx, id)
		var rej *sdk.RejectedError
		switch {
		case got != nil:
			h := history(t, cl, id)
			t.Errorf("%s: task %s was created and is %s although its graph was rejected\n%s", in.name, id, got.State, describe(h))
		case !errors.As(err, &rej):
			t.Errorf("%s: Get(%s) = %v, want a rejection", in.name, id, err)
		default:
			checkRejection(t, in, rej.Rejection)
		}
	}
	// Whatever happened, no message may be stuck in redelivery.
	for _, cons := range []struct{ stream, name string }{
		{subject.StreamSubmit, subject.ConsumerSubmit},
		{subject.StreamCompleted, subject.ConsumerCompleted},
	} {
		waitDrained(t, ctx, js, cons.stream, cons.name, 2*time.Minute,
			"consumer "+cons.name+" to drain (an orchestrator failing on a message never drains)")
	}
}

// TestDependentRightAfterUpstream: Submit returns once JetStream stored the
// submission, so a task submitted right after the Submit of its upstream
// returned depends on a task that exists as far as the producer can tell;
// it must not be rejected as depending on an unknown task.
func TestDependentRightAfterUpstream(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	c.startOrchestrator("orch-1")
	c.startWorker("worker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const pairs = 100
	for i := range pairs {
		up, err := task.New(demo.TypeNoop, nil)
		if err != nil {
			t.Fatal(err)
		}
		up.ID = fmt.Sprintf("pair-%d-up", i)
		down := up
		down.ID, down.DependsOn = fmt.Sprintf("pair-%d-down", i), []string{up.ID}
		for _, s := range []task.Spec{up, down} {
			if _, err := cl.Submit(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	var rejected []string
	for i := range pairs {
		id := fmt.Sprintf("pair-%d-down", i)
		got, err := cl.Wait(ctx, id)
		var rej *sdk.RejectedError
		switch {
		case errors.As(err, &rej):
			rejected = append(rejected, id+": "+rej.Rejection.Reason)
		case err != nil:
			t.Fatalf("wait %s: %v", id, err)
		case got.State != task.Succeeded:
			t.Errorf("%s ended %s: %s", id, got.State, got.Reason)
		}
	}
	if len(rejected) > 0 {
		t.Errorf("%d of %d tasks submitted after their upstream's Submit returned were rejected, e.g. %s",
			len(rejected), pairs, rejected[0])
	}
}

// TestResubmitAfterRejection: a task whose submission was rejected (here a
// raw publish with a zero timeout) is submitted again, corrected, with the
// same id. There is no task with that id, so Submit must create one, not
// report success while the rejection stands.
func TestResubmitAfterRejection(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	c.startOrchestrator("orch-1")
	c.startWorker("worker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	down, err := task.New(demo.TypeNoop, nil)
	if err != nil {
		t.Fatal(err)
	}
	down.ID = "resubmit-down"
	if _, err := js.Publish(ctx, subject.Submit(demo.TypeNoop), []byte(`{"id":"resubmit-down","timeout":"0s"}`)); err != nil {
		t.Fatal(err)
	}
	var rej *sdk.RejectedError
	if _, err := cl.Wait(ctx, down.ID); !errors.As(err, &rej) {
		t.Fatalf("first submission of %s: %v, want a rejection (zero timeout)", down.ID, err)
	}
	if _, err := cl.Submit(ctx, down); err != nil {
		t.Fatalf("second submission of %s: %v", down.ID, err)
	}
	var got *task.Task
	eventually(t, 10*time.Second, "the resubmitted task to exist", func() (bool, string) {
		got, err = cl.Get(ctx, down.ID)
		return got != nil, fmt.Sprint(err)
	})
	if got, err = cl.Wait(ctx, down.ID); err != nil || got.State != task.Succeeded {
		t.Fatalf("resubmitted %s: %+v, %v", down.ID, got, err)
	}
}

// TestIdempotentSubmitAcrossRestart: a task submitted again after the
// server restarted (so JetStream's de-duplication window no longer helps)
// is neither created again nor run again, whether it comes through the SDK
// or as a raw publish without Nats-Msg-Id, even with a different payload.
func TestIdempotentSubmitAcrossRestart(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.startOrchestrator("orch-1")
	c.startWorker("worker-1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	x, err := task.New(demo.TypeSleep, demo.Params{Sleep: "10ms", Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	x.ID = "idem-x"
	// y goes through the other creation path (tasks with dependencies).
	y, err := task.New(demo.TypeNoop, demo.Params{Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	y.ID, y.DependsOn = "idem-y", []string{x.ID}
	for _, s := range []task.Spec{x, y} {
		if _, err := cl.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		if got, err := cl.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("first run of %s: %+v, %v", s.ID, got, err)
		}
	}
	before := map[string][]uint64{}
	for _, id := range []string{x.ID, y.ID} {
		for _, r := range history(t, cl, id) {
			before[id] = append(before[id], r.Revision)
		}
	}

	for round, kill9 := range []bool{false, true} {
		c.restartServer(kill9)
		waitConnected(t, nc)
		var lastSeq uint64
		for _, s := range []task.Spec{x, y} {
			retryOp(t, 30*time.Second, "submit "+s.ID+" again through the SDK", func(ctx context.Context) error {
				_, err := cl.Submit(ctx, s)
				return err
			})
			raw, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			changed := s
			changed.Payload = json.RawMessage(fmt.Sprintf(`{"label":"changed-%d"}`, round))
			rawChanged, err := json.Marshal(changed)
			if err != nil {
				t.Fatal(err)
			}
			for _, body := range [][]byte{raw, rawChanged} {
				ack, err := js.Publish(ctx, subject.Submit(s.Type), body) // no Nats-Msg-Id
				if err != nil {
					t.Fatalf("raw submit of %s: %v", s.ID, err)
				}
				lastSeq = max(lastSeq, ack.Sequence)
			}
		}
		eventually(t, 30*time.Second, "the orchestrator to handle the resubmissions", func() (bool, string) {
			info, err := js.Consumer(ctx, subject.StreamSubmit, subject.ConsumerSubmit)
			if err != nil {
				return false, err.Error()
			}
			ci := info.CachedInfo()
			return ci.AckFloor.Stream >= lastSeq && ci.NumAckPending == 0,
				fmt.Sprintf("ack floor %d, want %d; %d unacked", ci.AckFloor.Stream, lastSeq, ci.NumAckPending)
		})
		for _, id := range []string{x.ID, y.ID} {
			h := history(t, cl, id)
			var revs []uint64
			creations := 0
			for _, r := range h {
				revs = append(revs, r.Revision)
				if r.Event.Kind == task.KindTransition && r.Event.From == "" {
					creations++
				}
			}
			if creations != 1 || countAttemptEnds(h) != 1 || countAttemptEnds(h, task.Succeeded) != 1 {
				t.Errorf("round %d: %s has %d creations, %d attempts, %d successes; want 1 each\n%s", round, id, creations,
					countAttemptEnds(h), countAttemptEnds(h, task.Succeeded), describe(h))
			}
			if !slices.Equal(revs, before[id]) {
				t.Errorf("round %d: history of %s changed: revisions %v, before %v\n%s", round, id, revs, before[id], describe(h))
			}
			last := h[len(h)-1].Event.Task
			if last.State != task.Succeeded || !strings.Contains(string(last.Payload), `"first"`) {
				t.Errorf("round %d: %s is %s with payload %s; want the first submission, succeeded", round, id, last.State, last.Payload)
			}
		}
	}
}

// sendCommand publishes a raw command with a reply subject and returns the
// subscription its reply arrives on.
func sendCommand(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, subj, body string) *nats.Subscription {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	msg := nats.NewMsg(subj)
	msg.Data = []byte(body)
	msg.Header.Set(subject.HeaderReplyTo, inbox)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("command %s: %v", subj, err)
	}
	return sub
}

// awaitReply returns a command's reply, or ok false (the test marked
// failed) when none comes before ctx ends.
func awaitReply(t *testing.T, ctx context.Context, sub *nats.Subscription) (task.CommandReply, bool) {
	t.Helper()
	resp, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		t.Errorf("no reply (%v)", err)
		return task.CommandReply{}, false
	}
	var rep task.CommandReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		t.Fatalf("reply %q: %v", resp.Data, err)
	}
	return rep, true
}

// rejections reads every record of AX_REJECTED.
func rejections(ctx context.Context, js jetstream.JetStream) ([]task.Rejection, error) {
	st, err := js.Stream(ctx, subject.StreamRejected)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	var out []task.Rejection
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, err
		}
		var r task.Rejection
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			return nil, fmt.Errorf("decode rejection on %s: %w", msg.Subject(), err)
		}
		out = append(out, r)
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		if md.Sequence.Stream >= info.State.LastSeq {
			return out, nil
		}
	}
}

// keptInput is the input a rejection records for a body.
func keptInput(body []byte) string {
	if len(body) > rejectInputLimit {
		body = body[:rejectInputLimit]
	}
	if s := string(body); utf8.ValidString(s) {
		return s
	}
	return fmt.Sprintf("%q", body)
}

func checkRejection(t *testing.T, in badInput, r task.Rejection) {
	t.Helper()
	if !hasAll(r.Reason, in.want) {
		t.Errorf("%s: rejection reason %q, want it to mention %q", in.name, r.Reason, in.want)
	}
	if r.Subject != in.subject {
		t.Errorf("%s: rejection subject %q, want %q", in.name, r.Subject, in.subject)
	}
	if r.Input != keptInput(in.body) {
		t.Errorf("%s: rejection keeps input %.80q…, want %.80q…", in.name, r.Input, keptInput(in.body))
	}
	if r.RejectedAt.IsZero() {
		t.Errorf("%s: rejection has no time", in.name)
	}
}

func hasAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(strings.ToLower(s), strings.ToLower(sub)) {
			return false
		}
	}
	return true
}
