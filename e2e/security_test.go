package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/permission"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// securityAccount is the sample account (internal/permission) with
// executors that serve the demo task types `ax worker` has: the email
// executor reports demo.noop, demo.sleep, demo.split and demo.gather, the
// pdf executor demo.flaky and demo.fail, and each capability's tasks are
// of its executor's types.
func securityAccount() permission.Account {
	acct := permission.Sample()
	for i, u := range acct.Users {
		switch u.Name {
		case "executor-email":
			acct.Users[i].Types = []string{demo.TypeNoop, demo.TypeSleep, demo.TypeSplit, demo.TypeGather, demo.TypeSteps}
		case "executor-pdf":
			acct.Users[i].Types = []string{demo.TypeFlaky, demo.TypeFail}
		case "producer-email":
			acct.Users[i].Types = []string{demo.TypeNoop}
		}
	}
	return acct
}

// TestSecurityLeastPrivilege runs AX against a nats-server with TLS
// (client certificates required) and the permission matrix of
// deploy/security: the orchestrator, an executor per capability (email,
// pdf), the mirror and the console are `ax` processes, the producer and
// operator clients use the SDK and the CLI, each on its own user. The
// normal workload runs without one permission violation; then each
// forbidden action is refused by the server or ignored by AX with a logged
// reason; afterwards every task has ended and nothing is left in the
// queues.
func TestSecurityLeastPrivilege(t *testing.T) {
	dsn, db := mirrortest.DB(t)
	c := newCluster(t)
	sec := startSecureNATS(t, c.dir, securityAccount())
	c.url = sec.url
	withUser := func(user string, args ...string) []string { return append(args, sec.args(user)...) }

	c.newProc("orchestrator", withUser("orchestrator", "orchestrator", "--node-id", "orc-1", "--log-level", logLevel(),
		"--retry-base", "100ms", "--retry-max", "500ms")...).start()
	workers := map[string]*proc{}
	for _, capability := range []string{"email", "pdf"} {
		workers[capability] = c.newProc("worker-"+capability, withUser("executor-"+capability, "worker", "--id", "worker-"+capability,
			// A 1 s heartbeat: attempts of a few seconds are marked running
			// through ax.claim.<capability>, under the executor's rights.
			"--capabilities", capability, "--ack-wait", "3s", "--log-level", logLevel())...)
		workers[capability].start()
	}
	c.newProc("mirror", withUser("mirror", "mirror", "--mysql-dsn", dsn, "--log-level", logLevel())...).start()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prodNC := sec.connect("producer")
	var prod *sdk.Client
	retryOp(t, 60*time.Second, "producer client (the orchestrator creates the streams)", func(ctx context.Context) error {
		var err error
		prod, err = sdk.New(ctx, prodNC)
		return err
	})
	opNC := sec.connect("operator")
	op, err := sdk.New(ctx, opNC)
	if err != nil {
		t.Fatal(err)
	}
	op.Caller = "operator" // commands go to ax.cmd.as.operator.…, the only ones its user may send

	// ---- The normal workload, every role on its own user. ----
	want := map[string]task.State{}
	submit := func(id, typ, capability string, p demo.Params, mod func(*task.Spec)) {
		t.Helper()
		s, err := task.New(typ, p)
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.Capability = id, capability
		if mod != nil {
			mod(&s)
		}
		if _, err := prod.Submit(ctx, s); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	for i := range 20 {
		id := fmt.Sprintf("email-noop-%02d", i)
		submit(id, demo.TypeNoop, "email", demo.Params{}, nil)
		want[id] = task.Succeeded
	}
	submit("email-sleep", demo.TypeSleep, "email", demo.Params{Sleep: "300ms", Label: "slept"}, nil)
	want["email-sleep"] = task.Succeeded
	submit("email-split", demo.TypeSplit, "email", demo.Params{Shards: 5, Size: 10}, func(s *task.Spec) { s.Shardable = true })
	want["email-split"] = task.Succeeded
	gather, _ := task.New(demo.TypeGather, demo.Params{Label: "gathered"})
	gather.ID, gather.Capability, gather.DependsOn = "email-gather", "email", []string{"email-sleep", "email-noop-00", "pdf-flaky"}
	if _, err := prod.SubmitGraph(ctx, []task.Spec{gather}); err != nil {
		t.Fatal(err)
	}
	want["email-gather"] = task.Succeeded
	// Durable steps and a sleep under the executor's own rights: steps
	// are stored through its report subject, a large one as an object in
	// email's store.
	steps, _ := task.New(demo.TypeSteps, demo.StepsParams{Steps: 3, Nap: "300ms", Pad: task.StepInlineLimit + 1})
	steps.ID, steps.Capability = "email-steps", "email"
	if _, err := prod.Submit(ctx, steps); err != nil {
		t.Fatal(err)
	}
	want["email-steps"] = task.Succeeded
	// A result over 16 KiB: an object in pdf's store, which email-gather
	// (an email task) and the producer read.
	submit("pdf-flaky", demo.TypeFlaky, "pdf", demo.Params{FailTimes: 1, Label: "flaked", Pad: task.InlineResultLimit}, nil)
	want["pdf-flaky"] = task.Succeeded
	submit("pdf-fail", demo.TypeFail, "pdf", demo.Params{}, func(s *task.Spec) { s.MaxRetries = new(0) })
	want["pdf-fail"] = task.Failed
	// Cancelled by an operator while it runs: the orchestrator signals the
	// executor, which checks the record and stops the handler.
	submit("email-cancel-me", demo.TypeSleep, "email", demo.Params{Sleep: "2m"}, nil)
	want["email-cancel-me"] = task.Cancelled
	waitState(t, ctx, prod, "email-cancel-me", task.Running)
	axAs(t, sec, "operator", "cancel", "email-cancel-me", "--reason", "security e2e")

	for id, st := range want {
		got, err := prod.Wait(ctx, id)
		if err != nil || got.State != st {
			t.Fatalf("%s: %+v, %v; want %s", id, got, err, st)
		}
	}
	// The operator's cancel is recorded under the name its user may send as.
	if got, err := prod.Get(ctx, "email-cancel-me"); err != nil || !strings.Contains(got.Reason, "(by operator)") {
		t.Fatalf("email-cancel-me: reason %q, %v; want the caller recorded", got.Reason, err)
	}
	if got, err := prod.Get(ctx, "email-steps"); err != nil || len(got.Steps) != 5 || got.Attempt != 1 ||
		got.Steps[4].Name != "pad" || got.Steps[4].ResultBucket != subject.ObjectBucket("email") || !strings.Contains(string(got.Result), fmt.Sprintf(`"pad":%d`, task.StepInlineLimit+1)) {
		t.Fatalf("email-steps: %+v, %v; want 3 steps, a sleep and a stored object in attempt 1", got, err)
	}
	if res, err := prod.Result(ctx, "email-split"); err != nil || !strings.Contains(string(res), `"shards":5`) {
		t.Fatalf("result of email-split: %s, %v", res, err)
	}
	if ins, err := prod.Inputs(ctx, "email-gather"); err != nil || len(ins) != 3 {
		t.Fatalf("inputs of email-gather: %+v, %v", ins, err)
	}
	// Objects are in their capability's store: the plan of email-split in
	// email's, the large result of pdf-flaky in pdf's, read by an email
	// executor (email-gather saw its label) and by the producer.
	if got, err := prod.Get(ctx, "email-split"); err != nil || got.Sharding == nil || got.Sharding.Bucket != subject.ObjectBucket("email") {
		t.Fatalf("plan of email-split: %+v, %v; want it in %s", got, err, subject.ObjectBucket("email"))
	}
	flaky, err := prod.Get(ctx, "pdf-flaky")
	if err != nil || flaky.ResultObject == "" || flaky.ResultBucket != subject.ObjectBucket("pdf") || flaky.ResultDigest == "" {
		t.Fatalf("pdf-flaky: %+v, %v; want its result an object in %s", flaky, err, subject.ObjectBucket("pdf"))
	}
	if res, err := prod.Result(ctx, "pdf-flaky"); err != nil || !strings.Contains(string(res), `"label":"flaked"`) {
		t.Fatalf("result of pdf-flaky: %d bytes, %v", len(res), err)
	}
	if got, err := prod.Get(ctx, "email-gather"); err != nil || !strings.Contains(string(got.Result), `"id":"pdf-flaky","state":"succeeded","label":"flaked"`) {
		t.Fatalf("email-gather: %+v, %v; want pdf-flaky's label read from its object", got, err)
	}
	if _, err := prod.History(ctx, "pdf-flaky"); err != nil {
		t.Fatal(err)
	}
	if sp, err := prod.Shards(ctx, "email-split"); err != nil || sp.Total != 5 {
		t.Fatalf("shards of email-split: %+v, %v", sp, err)
	}
	// Operator reads and commands, through the SDK and the CLI.
	if dl, err := op.DeadLetters(ctx); err != nil || len(dl) != 1 {
		t.Fatalf("dead letters: %+v, %v", dl, err)
	}
	if _, err := op.Gates(ctx); err != nil {
		t.Fatal(err)
	}
	if err := op.Pause(ctx, demo.TypeFail, false, "security e2e"); err != nil {
		t.Fatal(err)
	}
	if err := op.Resume(ctx, demo.TypeFail, "security e2e"); err != nil {
		t.Fatal(err)
	}
	if _, err := op.AuditEvents(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Limits(ctx); err != nil { // AX_CONTROL's limits, AX_SLOTS
		t.Fatal(err)
	}
	if _, err := op.Schedules(ctx); err != nil {
		t.Fatal(err)
	}
	// Each executor announced itself in the workers registry under its
	// own user's rights; the operator reads it.
	if ws, err := op.Workers(ctx); err != nil || len(ws) != 2 || ws[0].ID != "worker-email" || ws[1].ID != "worker-pdf" {
		t.Fatalf("workers registry: %+v, %v; want worker-email and worker-pdf", ws, err)
	}
	if err := op.RecordAudit(ctx, task.AuditEvent{Kind: sdk.AuditOperator, Key: "security-e2e", Actor: "e2e"}); err != nil {
		t.Fatal(err)
	}
	rerun, err := op.Rerun(ctx, "email-noop-01")
	if err != nil {
		t.Fatal(err)
	}
	want[rerun] = task.Succeeded
	if _, err := op.RedriveWithReason(ctx, "pdf-fail", "security e2e"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", "pdf-flaky"}, {"dlq", "list"}, {"rejected"}, {"schedule", "list"}, {"poison", "list"}, {"limits"}} {
		axAs(t, sec, "operator", args...)
	}
	if got, err := prod.Wait(ctx, "pdf-fail"); err != nil || got.State != task.Failed || got.Redrives != 1 {
		t.Fatalf("pdf-fail after its re-drive: %+v, %v", got, err)
	}
	// The console, on its own user: every page renders.
	cons := c.newProc("console", withUser("console", "console", "--addr", "127.0.0.1:0", "--mysql-dsn", dsn, "--as", "console", "--log-level", logLevel())...)
	cons.start()
	base := waitConsoleURL(t, cons)
	for _, page := range []string{"", "api/overview", "tasks?state=failed", "task/email-gather", "task/email-split", "task/pdf-flaky", "dlq", "rejected", "schedules"} {
		getPage(t, base+page)
	}
	if v := sec.violations(""); len(v) > 0 {
		t.Fatalf("the normal workload was refused %d times:\n%s", len(v), strings.Join(v, "\n"))
	}

	// ---- Forbidden actions. ----
	js := func(nc *nats.Conn) jetstream.JetStream {
		j, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	// A refused request gets no answer: the call fails when its context
	// ends. The refusal itself is confirmed by the server's log, so a short
	// bound cannot make a check pass that should fail.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 500*time.Millisecond) }
	// refused runs a JetStream call that must fail, and waits for the
	// server's log of the refusal.
	refused := func(user, kind, subj string, call func(ctx context.Context) error) {
		t.Helper()
		cctx, done := short()
		defer done()
		if err := call(cctx); err == nil {
			t.Fatalf("%s: %s %s succeeded; want a refusal", user, kind, subj)
		}
		sec.waitViolation(user, kind, subj)
	}
	// refusedPub publishes on core NATS (no answer to wait for) and waits
	// for the server's log of the refusal.
	refusedPub := func(nc *nats.Conn, user, subj string, data []byte) {
		t.Helper()
		if err := nc.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		sec.waitViolation(user, "Publish", subj)
	}
	refusedSub := func(nc *nats.Conn, user, subj string) {
		t.Helper()
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		sec.waitViolation(user, "Subscription", subj)
	}
	// Each step is one forbidden action (not a subtest: the helpers fail
	// the test itself).
	step := func(name string, f func()) {
		t.Helper()
		t.Logf("forbidden: %s", name)
		f()
	}
	emailNC := sec.connect("executor-email") // what a compromised email executor could do
	emailJS := js(emailNC)
	prodJS := js(prodNC)
	orcNC := sec.connect("orchestrator")
	orcJS := js(orcNC)
	history := func(id string) int {
		h, err := prod.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}

	step("producer writes a record", func() {
		before := history("email-noop-02")
		refused("producer", "Publish", subject.TaskEvents("email-noop-02"), func(ctx context.Context) error {
			_, err := prodJS.Publish(ctx, subject.TaskEvents("email-noop-02"), []byte(`{"kind":"transition"}`))
			return err
		})
		if after := history("email-noop-02"); after != before {
			t.Fatalf("history of email-noop-02 grew from %d to %d events", before, after)
		}
	})
	step("producer forges a dispatch, a report, a revocation, or reads the queues", func() {
		refused("producer", "Publish", subject.TaskDispatch("email-noop-03", "email", 0, demo.TypeNoop), func(ctx context.Context) error {
			_, err := prodJS.Publish(ctx, subject.TaskDispatch("email-noop-03", "email", 0, demo.TypeNoop), []byte(`{}`))
			return err
		})
		refused("producer", "Publish", subject.Completed(demo.TypeNoop), func(ctx context.Context) error {
			_, err := prodJS.Publish(ctx, subject.Completed(demo.TypeNoop), []byte(`{}`))
			return err
		})
		refusedPub(prodNC, "producer", "$KV."+subject.BucketRevoked+"."+subject.RevokedKey("email", "email-noop-03"), nil)
		refusedPub(prodNC, "producer", subject.Command(subject.CommandCancel, "email-noop-03"), nil) // not granted cancel
		refusedPub(prodNC, "producer", subject.CommandAs("producer", subject.CommandCancel, "email-noop-03"), nil)
		// The executors' ready consumers are theirs.
		refused("producer", "Publish", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p2", func(ctx context.Context) error {
			_, err := prodNC.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p2", []byte(`{"batch":1}`))
			return err
		})
		refused("producer", "Publish", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-mirror", func(ctx context.Context) error {
			_, err := prodNC.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-mirror", []byte(`{"batch":1}`))
			return err
		})
		refusedSub(prodNC, "producer", subject.ReplyInbox+".>")
	})
	step("a producer limited to a type submits another, or reads another type's tasks", func() {
		limNC := sec.connect("producer-email")
		lim, err := sdk.New(ctx, limNC)
		if err != nil {
			t.Fatal(err)
		}
		// Its own type: submitted, and its state read through an
		// orchestrator (also a task of its type that another producer
		// submitted).
		s, err := task.New(demo.TypeNoop, demo.Params{})
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.Capability = "limited-noop", "email"
		if _, err := lim.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"limited-noop", "email-noop-04"} {
			if got, err := lim.WaitState(ctx, demo.TypeNoop, id); err != nil || got.State != task.Succeeded {
				t.Fatalf("producer-email reading %s: %+v %v", id, got, err)
			}
		}
		// Under its type, a task of another type is not found.
		if _, err := lim.State(ctx, demo.TypeNoop, "email-sleep"); !errors.Is(err, sdk.ErrNotFound) {
			t.Fatalf("email-sleep under %s: %v, want not found", demo.TypeNoop, err)
		}
		refused("producer-email", "Publish", subject.State("email-sleep", demo.TypeSleep), func(ctx context.Context) error {
			_, err := lim.State(ctx, demo.TypeSleep, "email-sleep")
			return err
		})
		refused("producer-email", "Publish", "$JS.API.STREAM.MSG.GET.AX_TASKS", func(ctx context.Context) error {
			_, err := limNC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.AX_TASKS", []byte(`{"last_by_subj":"ax.task.email-sleep"}`))
			return err
		})
		refused("producer-email", "Publish", "$JS.API.DIRECT.GET.AX_TASKS.ax.task.email-sleep", func(ctx context.Context) error {
			_, err := limNC.RequestWithContext(ctx, "$JS.API.DIRECT.GET.AX_TASKS.ax.task.email-sleep", nil)
			return err
		})
		refused("producer-email", "Publish", "$JS.API.CONSUMER.CREATE.AX_TASKS.peek.ax.task.>", func(ctx context.Context) error {
			_, err := js(limNC).CreateOrUpdateConsumer(ctx, subject.StreamTasks, jetstream.ConsumerConfig{Durable: "peek", FilterSubject: subject.TaskAll})
			return err
		})
		refusedPub(limNC, "producer-email", subject.SubmitLane(0, demo.TypeSleep), []byte(`{"id":"limited-sleep","type":"demo.sleep"}`))
		// Get and Wait read the task streams: refused, and said so.
		for name, read := range map[string]func(context.Context) error{
			"Get":  func(ctx context.Context) error { _, err := lim.Get(ctx, "limited-noop"); return err },
			"Wait": func(ctx context.Context) error { _, err := lim.Wait(ctx, "limited-noop"); return err },
		} {
			rctx, done := context.WithTimeout(ctx, 3*time.Second)
			err := read(rctx)
			done()
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "WaitState") {
				t.Fatalf("producer-email %s: %v, want a permissions violation pointing at State and WaitState", name, err)
			}
		}
	})
	step("email executor takes pdf's dispatches, or reads task histories", func() {
		refused("executor-email", "Publish", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-pdf-p2."+subject.DispatchFilter("pdf", 2), func(ctx context.Context) error {
			_, err := emailJS.CreateOrUpdateConsumer(ctx, subject.StreamTasks, topology.ReadyConsumer("pdf", 2, 0))
			return err
		})
		// Its own consumer's name with pdf's filter (which would steal
		// pdf's work into email's consumer).
		refused("executor-email", "Publish", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p2."+subject.DispatchFilter("pdf", 2), func(ctx context.Context) error {
			cfg := topology.ReadyConsumer("email", 2, 0)
			cfg.FilterSubject = subject.DispatchFilter("pdf", 2)
			_, err := emailJS.CreateOrUpdateConsumer(ctx, subject.StreamTasks, cfg)
			return err
		})
		refused("executor-email", "Publish", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p2", func(ctx context.Context) error {
			// The filter only in the body.
			_, err := emailNC.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p2",
				[]byte(`{"stream_name":"AX_TASKS","config":{"durable_name":"ax-ready-email-p2","filter_subject":"ax.task.>","ack_policy":"explicit"}}`))
			return err
		})
		refused("executor-email", "Publish", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-pdf-p2", func(ctx context.Context) error {
			_, err := emailNC.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-pdf-p2", []byte(`{"batch":1}`))
			return err
		})
		// A dispatch holds its execution's token: executors read no history.
		refused("executor-email", "Publish", "$JS.API.STREAM.MSG.GET.AX_TASKS", func(ctx context.Context) error {
			_, err := emailNC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.AX_TASKS", []byte(`{"last_by_subj":"ax.task.pdf-flaky.>"}`))
			return err
		})
		refused("executor-email", "Publish", "$JS.API.DIRECT.GET.AX_TASKS", func(ctx context.Context) error {
			_, err := emailNC.RequestWithContext(ctx, "$JS.API.DIRECT.GET.AX_TASKS", []byte(`{"last_by_subj":"ax.task.pdf-flaky.>"}`))
			return err
		})
		refusedSub(emailNC, "executor-email", subject.BellCapability("pdf"))
		refusedSub(emailNC, "executor-email", subject.ReplyInbox+".>")
		refusedSub(emailNC, "executor-email", permission.User{Name: "executor-pdf"}.InboxPrefix()+".>")
	})
	step("email executor writes or claims a record", func() {
		refusedPub(emailNC, "executor-email", subject.Claim("pdf"), []byte(`{}`))
		// Nor keep a pdf task "alive" with a forged lease.
		refusedPub(emailNC, "executor-email", subject.Lease("pdf", "pdf-flaky"), []byte(`{}`))
		refusedPub(emailNC, "executor-email", subject.LegacyLease("pdf-flaky"), []byte(`{}`))
		before := history("pdf-flaky")
		refused("executor-email", "Publish", subject.TaskEvents("pdf-flaky"), func(ctx context.Context) error {
			_, err := emailJS.Publish(ctx, subject.TaskEvents("pdf-flaky"), []byte(`{"kind":"transition"}`))
			return err
		})
		if after := history("pdf-flaky"); after != before {
			t.Fatalf("history of pdf-flaky grew from %d to %d events", before, after)
		}
		// A pdf task nobody has pulled yet (the pdf worker is down), which
		// a claim of its own capability would get: the email executor
		// asks for it on its own claim subject, and is not granted it.
		workers["pdf"].term()
		submit("pdf-unclaimed", demo.TypeFlaky, "pdf", demo.Params{Label: "claimed by pdf"}, nil)
		want["pdf-unclaimed"] = task.Succeeded
		waitState(t, ctx, prod, "pdf-unclaimed", task.Ready)
		// Its execution id, as the email executor might learn it (it cannot
		// read the record itself).
		tasks, err := orcJS.Stream(ctx, subject.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := tasks.GetLastMsgForSubject(ctx, subject.TaskHistory("pdf-unclaimed"))
		if err != nil {
			t.Fatal(err)
		}
		var ev task.Event
		if err := json.Unmarshal(raw.Data, &ev); err != nil {
			t.Fatal(err)
		}
		// task.ClaimRequest's fields.
		req, _ := json.Marshal(map[string]any{"id": "pdf-unclaimed", "execution_id": ev.Task.ExecutionID, "revision": raw.Sequence,
			"executor": "forger", "started_at": time.Now().UTC(), "delivered": 1})
		reply, err := emailNC.RequestWithContext(ctx, subject.Claim("email"), req)
		if err != nil {
			t.Fatalf("claim request: %v", err)
		}
		var rep struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.Status == "granted" {
			t.Fatalf("the email executor's claim of a pdf task: %s, %v; want it refused", reply.Data, err)
		}
		workers["pdf"].start()
		if got, err := prod.Wait(ctx, "pdf-unclaimed"); err != nil || got.State != task.Succeeded || got.Executor != "worker-pdf" {
			t.Fatalf("pdf-unclaimed: %+v, %v; want succeeded on worker-pdf", got, err)
		}
	})
	step("email executor reports pdf's task", func() {
		submit("pdf-long", demo.TypeFlaky, "pdf", demo.Params{Sleep: "8s", Label: "real"}, nil)
		want["pdf-long"] = task.Succeeded
		// Ready (dispatched under its execution id) while it runs: an
		// attempt is marked running only after a heartbeat.
		waitState(t, ctx, prod, "pdf-long", task.Ready)
		// Its execution id, as the email executor might learn it (it cannot
		// read the record itself: the step above).
		tasks, err := orcJS.Stream(ctx, subject.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := tasks.GetLastMsgForSubject(ctx, subject.TaskHistory("pdf-long"))
		if err != nil {
			t.Fatalf("pdf-long's record: %v", err)
		}
		var ev task.Event
		if err := json.Unmarshal(raw.Data, &ev); err != nil {
			t.Fatal(err)
		}
		forge := func(subj, typ string) func(ctx context.Context) error {
			r := task.Report{ID: "pdf-long", Type: typ, ExecutionID: ev.Task.ExecutionID, Attempt: ev.Task.Attempt, Executor: "forger",
				StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(), Status: task.OutcomeSucceeded, Result: json.RawMessage(`"forged"`)}
			data, _ := json.Marshal(r)
			return func(ctx context.Context) error { _, err := emailJS.Publish(ctx, subj, data); return err }
		}
		refused("executor-email", "Publish", subject.Completed(demo.TypeFlaky), forge(subject.Completed(demo.TypeFlaky), demo.TypeFlaky))
		// On a subject it may publish: dropped by the orchestrator.
		for _, typ := range []string{demo.TypeFlaky, demo.TypeNoop} {
			cctx, done := short()
			if err := forge(subject.Completed(demo.TypeNoop), typ)(cctx); err != nil {
				t.Fatalf("publish on %s: %v", subject.Completed(demo.TypeNoop), err)
			}
			done()
		}
		waitLog(t, c, "orchestrator", "dropping a report whose task type is not its subject's")
		// Not its execution: the token check drops it before the type's.
		waitLog(t, c, "orchestrator", "dropping a report without its execution's token")
		got, err := prod.Wait(ctx, "pdf-long")
		if err != nil || got.State != task.Succeeded || strings.Contains(string(got.Result), "forged") {
			t.Fatalf("pdf-long: %+v, %v; want succeeded with its own result", got, err)
		}
	})
	step("email executor reports, claims or leases an email execution it was not dispatched", func() {
		submit("email-held", demo.TypeSleep, "email", demo.Params{Sleep: "4s", Label: "slept"}, nil)
		want["email-held"] = task.Succeeded
		waitState(t, ctx, prod, "email-held", task.Running)
		tasks, err := orcJS.Stream(ctx, subject.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := tasks.GetLastMsgForSubject(ctx, subject.TaskHistory("email-held"))
		if err != nil {
			t.Fatal(err)
		}
		var ev task.Event
		if err := json.Unmarshal(raw.Data, &ev); err != nil {
			t.Fatal(err)
		}
		// Everything but the token is right, on subjects it may publish.
		for _, tok := range []string{"", "AAAAAAAAAAAAAAAAAAAAAA"} {
			r := task.Report{ID: "email-held", Type: demo.TypeSleep, ExecutionID: ev.Task.ExecutionID, Attempt: ev.Task.Attempt,
				Executor: "forger", StartedAt: time.Now().UTC(), FinishedAt: time.Now().UTC(), Status: task.OutcomeSucceeded,
				Result: json.RawMessage(`"forged"`), Token: tok}
			data, _ := json.Marshal(r)
			if _, err := emailJS.Publish(ctx, subject.Completed(demo.TypeSleep), data); err != nil {
				t.Fatalf("publish a report on %s: %v", subject.Completed(demo.TypeSleep), err)
			}
		}
		lease, _ := json.Marshal(task.Lease{ExecutionID: ev.Task.ExecutionID, Executor: "forger", At: time.Now().UTC()})
		if _, err := emailJS.Publish(ctx, subject.Lease("email", "email-held"), lease); err != nil {
			t.Fatalf("publish a lease: %v", err)
		}
		req, _ := json.Marshal(task.ClaimRequest{ID: "email-held", ExecutionID: ev.Task.ExecutionID, Revision: raw.Sequence,
			Executor: "forger", StartedAt: time.Now().UTC(), Delivered: 2})
		reply, err := emailNC.RequestWithContext(ctx, subject.Claim("email"), req)
		if err != nil {
			t.Fatalf("claim request: %v", err)
		}
		var rep task.ClaimReply
		if err := json.Unmarshal(reply.Data, &rep); err != nil || rep.Status != task.ClaimEnded || !strings.Contains(rep.Error, "execution token") {
			t.Fatalf("a takeover claim without the token: %s, %v; want it refused", reply.Data, err)
		}
		waitLog(t, c, "orchestrator", "refusing a claim without its execution's token")
		got, err := prod.Wait(ctx, "email-held")
		if err != nil || got.State != task.Succeeded || got.Executor != "worker-email" || strings.Contains(string(got.Result), "forged") {
			t.Fatalf("email-held: %+v, %v; want succeeded on worker-email with its own result", got, err)
		}
		waitLog(t, c, "orchestrator", "dropping a report without its execution's token")
	})
	step("the email executor writes an object into pdf's store", func() {
		// A chunk, and the meta entry of pdf-flaky's result (a forged
		// object in its place), in pdf's store and in the legacy one.
		meta := func(bucket, name string) string {
			return "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
		}
		forged, _ := json.Marshal(map[string]any{"name": flaky.ResultObject, "bucket": flaky.ResultBucket, "nuid": "forged", "size": 6, "chunks": 1})
		for _, subj := range []string{
			"$O." + subject.ObjectBucket("pdf") + ".C.forged",
			meta(subject.ObjectBucket("pdf"), flaky.ResultObject),
			"$O." + subject.BucketObjects + ".C.forged",
		} {
			refused("executor-email", "Publish", subj, func(ctx context.Context) error {
				_, err := emailJS.Publish(ctx, subj, forged)
				return err
			})
		}
		if res, err := prod.Result(ctx, "pdf-flaky"); err != nil || !strings.Contains(string(res), `"label":"flaked"`) {
			t.Fatalf("result of pdf-flaky after the forgery: %d bytes, %v", len(res), err)
		}
	})
	step("the email executor publishes a rollup-all meta message on pdf's store", func() {
		// It would empty the whole store (object stores allow rollups).
		subj := "$O." + subject.ObjectBucket("pdf") + ".M." + base64.URLEncoding.EncodeToString([]byte("anything"))
		refused("executor-email", "Publish", subj, func(ctx context.Context) error {
			msg := nats.NewMsg(subj)
			msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
			msg.Data = []byte(`{"name":"anything","deleted":true}`)
			_, err := emailJS.PublishMsg(ctx, msg)
			return err
		})
		info, err := orcJS.Stream(ctx, "OBJ_"+subject.ObjectBucket("pdf"))
		if err != nil || info.CachedInfo().State.Msgs == 0 {
			t.Fatalf("pdf's object store after the rollup: %+v, %v; want its objects kept", info, err)
		}
		if res, err := prod.Result(ctx, "pdf-flaky"); err != nil || !strings.Contains(string(res), `"label":"flaked"`) {
			t.Fatalf("result of pdf-flaky after the rollup: %d bytes, %v", len(res), err)
		}
	})
	step("executor changes the topology", func() {
		refused("executor-email", "Publish", "$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context) error {
			_, err := emailJS.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		})
		refused("executor-email", "Publish", "$JS.API.STREAM.DELETE."+subject.StreamTasks, func(ctx context.Context) error {
			return emailJS.DeleteStream(ctx, subject.StreamTasks)
		})
		refused("executor-email", "Publish", "$JS.API.STREAM.UPDATE."+subject.StreamTasks, func(ctx context.Context) error {
			_, err := emailJS.UpdateStream(ctx, jetstream.StreamConfig{Name: subject.StreamTasks, Subjects: []string{subject.TaskAll}, MaxMsgs: 1})
			return err
		})
		refused("executor-email", "Publish", "$JS.API.STREAM.PURGE."+subject.StreamTasks, func(ctx context.Context) error {
			_, err := emailNC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+subject.StreamTasks, nil)
			return err
		})
		refused("executor-email", "Publish", "$JS.API.CONSUMER.DELETE.AX_SUBMIT."+subject.ConsumerSubmit, func(ctx context.Context) error {
			return emailJS.DeleteConsumer(ctx, subject.StreamSubmit, subject.ConsumerSubmit)
		})
		if info, err := orcJS.Stream(ctx, subject.StreamTasks); err != nil || info.CachedInfo().Config.MaxMsgs == 1 {
			t.Fatalf("stream %s after the executor's attempts: %v", subject.StreamTasks, err)
		}
		if _, err := orcJS.Stream(ctx, "EVIL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("stream EVIL: %v; want not found", err)
		}
	})
	step("mirror writes", func() {
		mirNC := sec.connect("mirror")
		refusedPub(mirNC, "mirror", subject.TaskEvents("email-noop-04"), []byte(`{}`))
		refused("mirror", "Publish", "$JS.API.STREAM.PURGE."+subject.StreamTasks, func(ctx context.Context) error {
			_, err := mirNC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+subject.StreamTasks, nil)
			return err
		})
	})
	step("forged revocation", func() {
		submit("email-long", demo.TypeSleep, "email", demo.Params{Sleep: "8s", Label: "not cancelled"}, nil)
		want["email-long"] = task.Succeeded
		waitState(t, ctx, prod, "email-long", task.Running)
		// Only orchestrators revoke an execution (an executor acts on a
		// revocation without asking): neither an executor nor a producer
		// may write AX_REVOKED.
		forged := "$KV." + subject.BucketRevoked + "." + subject.RevokedKey("email", "email-long")
		refusedPub(emailNC, "executor-email", forged, []byte(`{}`))
		refusedPub(prodNC, "producer", forged, []byte(`{}`))
		if got, err := prod.Wait(ctx, "email-long"); err != nil || got.State != task.Succeeded {
			t.Fatalf("email-long: %+v, %v; want succeeded", got, err)
		}
	})
	step("operator sends a command under another name", func() {
		// Only ax.cmd.as.operator.…: the name the orchestrator records is
		// the one the server authenticated.
		refusedPub(opNC, "operator", subject.CommandAs("console", subject.CommandCancel, "email-noop-04"), nil)
		refusedPub(opNC, "operator", subject.Command(subject.CommandCancel, "email-noop-04"), nil)
	})
	step("command reply on a record", func() {
		submit("reply-target", demo.TypeNoop, "nobody", demo.Params{}, nil) // stays ready
		want["reply-target"] = task.Cancelled
		waitState(t, ctx, prod, "reply-target", task.Ready)
		before := history("email-noop-05")
		msg := nats.NewMsg(subject.CommandAs("operator", subject.CommandCancel, "reply-target"))
		msg.Header.Set(subject.HeaderReplyTo, subject.TaskEvents("email-noop-05"))
		if _, err := js(opNC).PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, prod, "reply-target", task.Cancelled)
		waitLog(t, c, "orchestrator", "command reply not sent: its Ax-Reply-To is not an inbox")
		if after := history("email-noop-05"); after != before {
			t.Fatalf("history of email-noop-05 grew from %d to %d events", before, after)
		}
	})
	step("client without credentials or TLS", func() {
		set := sec.settings("producer")
		set.User, set.PasswordFile = "", ""
		if nc, err := natsconn.Connect(set, nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatal("a client without credentials connected")
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("without credentials: %v; want an authorization violation", err)
		}
		set = sec.settings("producer")
		set.TLSCert, set.TLSKey = "", ""
		if nc, err := natsconn.Connect(set, nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatal("a client without a TLS client certificate connected")
		}
		// A plain-text client with a valid password: the server takes its
		// CONNECT for a TLS handshake, fails it and closes the connection.
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(sec.url, "tls://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		rd := bufio.NewReader(conn)
		if info, err := rd.ReadString('\n'); err != nil || !strings.Contains(info, `"tls_required":true`) {
			t.Fatalf("INFO: %q, %v", info, err)
		}
		fmt.Fprintf(conn, "CONNECT {\"user\":\"producer\",\"pass\":%q,\"verbose\":false}\r\nPING\r\n", sec.passwords["producer"])
		rest, err := io.ReadAll(rd)
		if err != nil || strings.Contains(string(rest), "PONG") {
			t.Fatalf("plain-text client got %q, %v; want the connection closed without a PONG", rest, err)
		}
	})

	// ---- Nothing lost or stuck. ----
	for id, st := range want {
		got, err := prod.Wait(ctx, id)
		if err != nil || got.State != st {
			t.Fatalf("%s at the end: %+v, %v; want %s", id, got, err, st)
		}
	}
	for _, capability := range []string{"email", "pdf"} {
		for lvl := range subject.Priorities {
			waitDrained(t, ctx, orcJS, subject.StreamTasks, subject.ReadyConsumer(capability, lvl), 30*time.Second,
				"the ready queue of "+capability)
		}
	}
	waitDrained(t, ctx, orcJS, subject.StreamCompleted, subject.ConsumerCompleted, 30*time.Second, "the reports")
	tasksInfo, err := orcJS.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	last := tasksInfo.CachedInfo().State.LastSeq
	eventually(t, time.Minute, "the mirror catching up", func() (bool, string) {
		var n int64
		_ = db.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM ax_events").Scan(&n)
		return uint64(n) >= last, fmt.Sprintf("mirrored up to %d of %d", n, last)
	})
	// The test's own connections are named e2e-<user>; AX's processes were
	// never refused, during the forbidden actions either.
	var axRefused []string
	for _, v := range sec.violations("") {
		if !strings.Contains(v, ":go:e2e-") {
			axRefused = append(axRefused, v)
		}
	}
	if len(axRefused) > 0 {
		t.Errorf("AX's processes were refused:\n%s", strings.Join(axRefused, "\n"))
	}
}

// waitState waits until a task is in state.
func waitState(t *testing.T, ctx context.Context, c *sdk.Client, id string, st task.State) {
	t.Helper()
	eventually(t, 60*time.Second, id+" "+string(st), func() (bool, string) {
		got, err := c.Get(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return got.State == st, string(got.State)
	})
}

// waitLog waits until the log of the process named name holds text.
func waitLog(t *testing.T, c *cluster, name, text string) {
	t.Helper()
	for _, p := range c.procs {
		if p.name != name {
			continue
		}
		eventually(t, 30*time.Second, name+" logging "+text, func() (bool, string) {
			data, _ := os.ReadFile(p.logPath)
			return strings.Contains(string(data), text), tail(p.logPath, 3)
		})
		return
	}
	t.Fatalf("no process %s", name)
}

// axAs runs an ax command as user and returns its output.
func axAs(t *testing.T, sec *secureNATS, user string, args ...string) string {
	t.Helper()
	// Commands are sent as the user (ax.cmd.as.<user>.…), the only name its
	// permissions allow.
	out, err := exec.Command(axBin, append(args, append(sec.args(user), "--as", user)...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ax %s as %s: %v\n%s", strings.Join(args, " "), user, err, out)
	}
	return string(out)
}

// getPage fetches a console page and requires a 200.
func getPage(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
}
