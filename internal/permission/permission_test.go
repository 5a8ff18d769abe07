package permission_test

import (
	"strings"
	"testing"

	"github.com/ax-run/ax/internal/permission"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
)

// match reports whether a NATS subject pattern matches subj ("*" one token,
// ">" one or more at the end).
func match(pattern, subj string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subj, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

func allowed(r permission.Rules, subj string) bool {
	ok := false
	for _, a := range r.Allow {
		ok = ok || match(a, subj)
	}
	for _, d := range r.Deny {
		ok = ok && !match(d, subj)
	}
	return ok
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, subj string
		want          bool
	}{
		{"a.>", "a.b.c", true}, {"a.>", "a", false}, {"a.*", "a.b", true}, {"a.*", "a.b.c", false},
		{"a.b", "a.b", true}, {"a.b", "a.b.c", false}, {"$JS.API.CONSUMER.CREATE.S.*.>", "$JS.API.CONSUMER.CREATE.S.n.f.>", true},
	} {
		if got := match(c.pattern, c.subj); got != c.want {
			t.Errorf("match(%q, %q) = %v", c.pattern, c.subj, got)
		}
	}
}

const (
	createEmailP0 = "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p0.ax.task.*.d.email.p0.>"
	createPdfP0   = "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-pdf-p0.ax.task.*.d.pdf.p0.>"
)

// The matrix of the sample account, subject by subject: what each role may
// and may not publish and subscribe to.
func TestMatrix(t *testing.T) {
	users := map[string]permission.Permissions{}
	acct := permission.Sample()
	for _, u := range acct.Users {
		users[u.Name] = u.Permissions(acct.Capabilities())
	}
	type check struct {
		user, subj string
		sub, want  bool
	}
	pub := func(user, subj string, want bool) check { return check{user, subj, false, want} }
	sub := func(user, subj string, want bool) check { return check{user, subj, true, want} }
	checks := []check{
		// Only the orchestrator writes records, dispatches, timers, topology.
		pub("orchestrator", subject.TaskEvents("x"), true),
		pub("orchestrator", subject.TaskDispatch("x", "email", 0, "email.send"), true),
		pub("orchestrator", subject.Bell("email", 0), true),
		sub("orchestrator", subject.Inputs("email"), true),
		pub("orchestrator", "$JS.API.STREAM.CREATE.AX_TASKS", true),
		pub("orchestrator", "$KV.AX_REVOKED.email.x", true),
		sub("orchestrator", subject.Claim("email"), true),
		sub("orchestrator", "_INBOX.orchestrator.abc", true),
		sub("orchestrator", "_INBOX.producer.abc", false),

		// The email executor: its own consumers, reports of its types,
		// leases, objects, reads; nothing of pdf's, no record, no topology.
		pub("executor-email", createEmailP0, true),
		pub("executor-email", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p5", true),
		pub("executor-email", "$JS.ACK.AX_TASKS.ax-ready-email-p3.1.2.3.4.5", true),
		pub("executor-email", subject.Inputs("email"), true),
		pub("executor-email", subject.Inputs("pdf"), false),
		pub("executor-email", subject.Completed("email.send"), true),
		pub("executor-email", subject.Lease("email", "x"), true),
		pub("executor-email", subject.Lease("pdf", "x"), false),
		pub("executor-email", subject.LegacyLease("x"), false),
		// No record read: a dispatch's token is in its message, and only
		// the executor it is delivered to may see it.
		pub("executor-email", "$JS.API.DIRECT.GET.AX_TASKS.ax.task.x.>", false),
		pub("executor-email", subject.Claim("email"), true),
		// Objects: written only in its capability's store; every
		// capability's (and the legacy AX_OBJECTS) read.
		pub("executor-email", "$O.AX_OBJECTS_email.C.abc", true),
		pub("executor-email", "$O.AX_OBJECTS_email.M.abc", true),
		pub("executor-email", "$O.AX_OBJECTS_pdf.C.abc", false),
		pub("executor-email", "$O.AX_OBJECTS_pdf.M.abc", false),
		pub("executor-email", "$O.AX_OBJECTS.C.abc", false),
		pub("executor-email", "$O.AX_OBJECTS.M.abc", false),
		pub("executor-email", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_pdf", true),
		pub("executor-email", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_email", true),
		pub("executor-email", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS", true),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.OBJ_AX_OBJECTS_pdf.abc.$O.AX_OBJECTS_pdf.C.xyz", true),
		pub("executor-email", "$JS.API.STREAM.PURGE.OBJ_AX_OBJECTS_pdf", false),
		pub("executor-email", "$JS.API.STREAM.PURGE.OBJ_AX_OBJECTS_email", false),
		pub("executor-email", "$JS.API.STREAM.DELETE.OBJ_AX_OBJECTS_email", false),
		pub("executor-email", "$JS.API.STREAM.MSG.DELETE.OBJ_AX_OBJECTS_pdf", false),
		pub("executor-pdf", "$O.AX_OBJECTS_pdf.M.abc", true),
		pub("executor-pdf", "$O.AX_OBJECTS_email.M.abc", false),
		pub("orchestrator", "$O.AX_OBJECTS_pdf.M.abc", true),
		pub("orchestrator", "$JS.API.STREAM.CREATE.OBJ_AX_OBJECTS_pdf", true),
		pub("executor-email", "$JS.API.STREAM.MSG.GET.AX_TASKS", false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.abc.ax.task.>", false),
		pub("executor-email", "$JS.API.STREAM.INFO.AX_TASKS", true),
		sub("executor-email", subject.BellCapability("email"), true),
		sub("executor-email", subject.ReadyCapability("email"), false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.KV_AX_REVOKED.abc.$KV.AX_REVOKED.email.>", true),
		pub("executor-email", createPdfP0, false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p0.ax.task.*.d.pdf.p0.>", false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p0.ax.task.>", false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p0", false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.any.ax.task.*.d.email.p0.>", false),
		pub("executor-email", "$JS.API.CONSUMER.DURABLE.CREATE.AX_TASKS.ax-ready-email-p0", false),
		pub("executor-email", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-pdf-p0", false),
		pub("executor-email", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-mirror", false),
		pub("executor-email", "$JS.ACK.AX_TASKS.ax-ready-pdf-p0.1.2.3.4.5", false),
		pub("executor-email", subject.Completed("pdf.render"), false),
		pub("executor-email", subject.Claim("pdf"), false),
		pub("executor-email", subject.TaskEvents("x"), false),
		pub("executor-email", "$KV.AX_REVOKED.email.x", false),
		pub("executor-email", subject.TaskDispatch("x", "email", 0, "email.send"), false),
		// Its own capability's doorbell it may ring (passing on a task
		// it has no handler for), another's not.
		pub("executor-email", subject.Bell("email", 0), true),
		pub("executor-email", subject.Bell("pdf", 0), false),
		pub("executor-email", subject.Submit("email.send"), false),
		pub("executor-email", "$JS.API.STREAM.CREATE.EVIL", false),
		pub("executor-email", "$JS.API.STREAM.DELETE.AX_TASKS", false),
		pub("executor-email", "$JS.API.STREAM.UPDATE.AX_TASKS", false),
		pub("executor-email", "$JS.API.STREAM.PURGE.AX_TASKS", false),
		pub("executor-email", "$JS.API.STREAM.PURGE.OBJ_AX_OBJECTS", false),
		pub("executor-email", "$JS.API.CONSUMER.DELETE.AX_TASKS.ax-ready-pdf-p0", false),
		pub("executor-email", "$JS.API.CONSUMER.DELETE.AX_TASKS.ax-ready-email-p0", false),
		pub("executor-email", "$KV.AX_CONTROL.pause.all", false),
		sub("executor-email", subject.BellCapability("pdf"), false),
		// Its announcement in the workers registry, under its own
		// capability only; reading the registry is the operators'.
		pub("executor-email", subject.KVKey(subject.BucketWorkers, subject.WorkerKey("email", "executor-1.example.com")), true),
		pub("executor-email", subject.KVKey(subject.BucketWorkers, subject.WorkerKey("pdf", "executor-1")), false),
		pub("executor-email", subject.KVKey(subject.BucketWorkers, "email"), false),
		pub("executor-email", "$JS.API.STREAM.INFO.KV_AX_WORKERS", true),
		pub("executor-email", "$JS.API.STREAM.PURGE.KV_AX_WORKERS", false),
		pub("executor-email", "$JS.API.CONSUMER.CREATE.KV_AX_WORKERS.abc.$KV.AX_WORKERS.>", false),
		pub("producer", subject.KVKey(subject.BucketWorkers, subject.WorkerKey("email", "x")), false),
		pub("operator", subject.KVKey(subject.BucketWorkers, subject.WorkerKey("email", "x")), false),
		pub("operator", "$JS.API.CONSUMER.CREATE.KV_AX_WORKERS.abc.$KV.AX_WORKERS.>", true),
		pub("operator", "$JS.API.STREAM.MSG.GET.KV_AX_WORKERS", true),
		sub("executor-email", subject.ReadyCapability("pdf"), false),
		sub("executor-email", "_INBOX.>", false),
		sub("executor-email", "_INBOX.executor-pdf.abc", false),
		sub("executor-email", subject.Claim("email"), false),

		// The producer: submits and reads; no command unless granted.
		pub("producer", subject.SubmitLane(0, "email.send"), true),
		pub("producer", subject.GraphSubmit, true),
		pub("producer", "$JS.API.STREAM.MSG.GET.AX_TASKS", true),
		pub("producer", "$JS.API.CONSUMER.CREATE.AX_TASKS.abc.ax.task.x", true),
		pub("producer", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-mirror.ax.task.>", false),
		pub("producer", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-mirror", false),
		pub("producer", "$JS.API.CONSUMER.DELETE.AX_TASKS.ax-mirror", false),
		// The executors' ready consumers are theirs alone.
		pub("producer", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-ready-email-p0.ax.task.*.d.email.p0.>", false),
		pub("producer", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p0", false),
		pub("producer", "$JS.API.CONSUMER.DELETE.AX_TASKS.ax-ready-pdf-p3", false),
		pub("producer", subject.Command(subject.CommandCancel, "x"), false),
		pub("producer", subject.TaskEvents("x"), false),
		pub("producer", subject.Completed("email.send"), false),
		pub("producer", "$KV.AX_REVOKED.email.x", false),
		pub("producer", "$JS.API.STREAM.PURGE.AX_TASKS", false),
		pub("producer", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_pdf", true),
		pub("producer", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS", true),
		pub("producer", "$O.AX_OBJECTS_pdf.M.abc", false),
		pub("producer", subject.State("x", "pdf.render"), true),

		// A producer limited to types: their submissions and their
		// tasks' state through an orchestrator; no stream of task state
		// (a stream read cannot be scoped by type).
		pub("producer-email", subject.SubmitLane(0, "email.send"), true),
		pub("producer-email", subject.Direct(subject.SubmitLane(0, "email.send")), true),
		pub("producer-email", subject.DirectBatch(subject.Submit("email.send")), true),
		pub("producer-email", subject.DirectBatch(subject.Submit("pdf.render")), false),
		pub("executor-email", subject.DirectBatch(subject.Completed("email.send")), true),
		pub("executor-email", subject.DirectBatch(subject.Completed("pdf.render")), false),
		pub("producer-email", subject.SubmitLane(0, "pdf.render"), false),
		pub("producer-email", subject.GraphSubmit, false),
		pub("producer-email", subject.State("x", "email.send"), true),
		pub("producer-email", subject.State("x", "email.send.bulk"), true),
		pub("producer-email", subject.State("x", "pdf.render"), false),
		pub("producer-email", subject.State("x", "email"), false),
		pub("producer-email", "$JS.API.STREAM.MSG.GET.AX_TASKS", false),
		pub("producer-email", "$JS.API.DIRECT.GET.AX_TASKS.ax.task.x", false),
		pub("producer-email", "$JS.API.CONSUMER.CREATE.AX_TASKS.abc.ax.task.x", false),
		pub("producer-email", "$JS.API.STREAM.MSG.GET.AX_EDGES", false),
		pub("producer-email", "$JS.API.STREAM.MSG.GET.AX_REJECTED", false),
		pub("producer-email", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_email", true),
		pub("producer-email", subject.TaskEvents("x"), false),
		sub("orchestrator", subject.State("x", "email.send"), true),

		// The mirror reads AX_TASKS only.
		pub("mirror", "$JS.API.CONSUMER.CREATE.AX_TASKS.ax-mirror.ax.task.>", true),
		pub("mirror", "$JS.ACK.AX_TASKS.ax-mirror.1.2.3.4.5", true),
		pub("mirror", subject.TaskEvents("x"), false),
		pub("mirror", "$JS.API.STREAM.PURGE.AX_TASKS", false),
		pub("mirror", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p0", false),
		pub("mirror", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_email", false),

		// Operators command and read; they write no record.
		pub("operator", subject.CommandAs("operator", subject.CommandRedrive, "x"), true),
		// Only under its own name: the recorded caller is vouched for.
		pub("operator", subject.Command(subject.CommandRedrive, "x"), false),
		pub("operator", subject.CommandAs("console", subject.CommandRedrive, "x"), false),
		pub("operator", subject.Audit("operator", "x"), true),
		pub("operator", "$JS.API.CONSUMER.INFO.AX_TASKS.ax-ready-email-p0", true),
		pub("operator", "$JS.API.CONSUMER.MSG.NEXT.AX_TASKS.ax-ready-email-p0", false),
		pub("operator", subject.Audit("breaker", "x"), false),
		pub("operator", subject.TaskEvents("x"), false),
		pub("operator", "$JS.API.STREAM.DELETE.AX_TASKS", false),
		pub("operator", "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_email", true),
		pub("operator", "$O.AX_OBJECTS_email.C.abc", false),
		pub("console", subject.CommandAs("console", subject.CommandCancel, "x"), true),
		pub("console", subject.CommandAs("operator", subject.CommandCancel, "x"), false),

		// Key limits: the orchestrator keeps the slots (AX_SLOTS) and the
		// tasks waiting for one (ax.slotwait.> in AX_HELD); operators and
		// the console read the slots and the limits (AX_CONTROL), and set
		// limits only through commands.
		pub("orchestrator", "$KV.AX_SLOTS.customer.42", true),
		pub("orchestrator", subject.SlotWait(2, "customer.42", "x"), true),
		pub("orchestrator", "$JS.API.CONSUMER.CREATE.AX_HELD.ax-slotwait.ax.slotwait.p0.customer.42.*", true),
		pub("operator", subject.CommandAs("operator", subject.CommandLimitSet, subject.LimitID("customer.*")), true),
		pub("operator", subject.CommandAs("operator", subject.CommandLimitDelete, subject.LimitID("customer.*")), true),
		pub("console", subject.CommandAs("console", subject.CommandLimitSet, subject.LimitID("customer.*")), true),
		pub("operator", "$JS.API.STREAM.MSG.GET.KV_AX_SLOTS", true),
		pub("operator", "$JS.API.DIRECT.GET.KV_AX_SLOTS.$KV.AX_SLOTS.customer.42", true),
		pub("operator", "$JS.API.CONSUMER.CREATE.KV_AX_SLOTS.abc.$KV.AX_SLOTS.>", true),
		pub("operator", "$JS.API.STREAM.INFO.KV_AX_SLOTS", true),
		pub("console", "$JS.API.CONSUMER.CREATE.KV_AX_SLOTS.abc.$KV.AX_SLOTS.>", true),
		pub("console", "$JS.API.CONSUMER.CREATE.KV_AX_CONTROL.abc.$KV.AX_CONTROL.limit.>", true),
		pub("operator", "$KV.AX_SLOTS.customer.42", false),
		pub("operator", "$KV.AX_CONTROL."+subject.ControlLimit("customer.*"), false),
		pub("operator", subject.SlotWait(2, "customer.42", "x"), false),
		pub("operator", "$JS.API.STREAM.PURGE.KV_AX_SLOTS", false),
		pub("executor-email", "$KV.AX_SLOTS.customer.42", false),
		pub("executor-email", "$JS.API.STREAM.MSG.GET.KV_AX_SLOTS", false),
		pub("executor-email", subject.SlotWait(2, "customer.42", "x"), false),
		pub("producer", "$KV.AX_SLOTS.customer.42", false),
		pub("producer", subject.Command(subject.CommandLimitSet, subject.LimitID("customer.*")), false),
		pub("mirror", "$JS.API.STREAM.MSG.GET.KV_AX_SLOTS", false),
		// Fairness: orchestrators mark the tasks they queue and ask each
		// other whether they still hold one; nobody else.
		pub("orchestrator", subject.FairOwner("abc"), true),
		pub("executor-email", subject.FairOwner("abc"), false),
	}
	// The execution-token key: only orchestrators read it, or any executor
	// could sign reports and claims for executions it was not dispatched.
	keyReads := []string{
		"$JS.API.STREAM.MSG.GET.KV_AX_KEYS",
		"$JS.API.DIRECT.GET.KV_AX_KEYS.$KV.AX_KEYS.execution-token",
		"$JS.API.DIRECT.GET.KV_AX_KEYS",
		"$JS.API.CONSUMER.CREATE.KV_AX_KEYS.x.$KV.AX_KEYS.>",
		"$JS.API.CONSUMER.CREATE.KV_AX_KEYS.x",
		"$JS.API.CONSUMER.MSG.NEXT.KV_AX_KEYS.x",
	}
	for _, u := range permission.Sample().Users {
		for _, s := range keyReads {
			checks = append(checks, pub(u.Name, s, u.Role == permission.Orchestrator))
		}
		checks = append(checks, sub(u.Name, "$KV.AX_KEYS.execution-token", false))
	}
	for _, c := range checks {
		p, ok := users[c.user]
		if !ok {
			t.Fatalf("no user %s", c.user)
		}
		r, kind := p.Publish, "publish"
		if c.sub {
			r, kind = p.Subscribe, "subscribe"
		}
		if got := allowed(r, c.subj); got != c.want {
			t.Errorf("%s may %s %s: %v, want %v", c.user, kind, c.subj, got, c.want)
		}
	}
}

// An executor serving several capabilities writes each one's object
// store; every user reads the stores of the capabilities it is given (the
// account's) and its own.
func TestObjectStores(t *testing.T) {
	acct := permission.Account{Users: []permission.User{
		{Name: "orchestrator", Role: permission.Orchestrator},
		{Name: "gpu", Role: permission.Executor, Capability: "gpu", Capabilities: []string{"cpu"}, Types: []string{"ml.>"}},
		{Name: "web", Role: permission.Executor, Capability: "web", Types: []string{"web.>"}},
		{Name: "shop", Role: permission.Producer},
	}}
	if got := strings.Join(acct.Capabilities(), ","); got != "cpu,gpu,web" {
		t.Fatalf("capabilities %s", got)
	}
	gpu := acct.Users[1].Permissions(acct.Capabilities())
	for subj, want := range map[string]bool{
		"$O.AX_OBJECTS_gpu.C.x": true, "$O.AX_OBJECTS_cpu.M.x": true, "$O.AX_OBJECTS_web.M.x": false,
		"$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_web": true, "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_other": false,
	} {
		if got := allowed(gpu.Publish, subj); got != want {
			t.Errorf("gpu may publish %s: %v, want %v", subj, got, want)
		}
	}
	// Without the account's capabilities an executor still reads its own.
	alone := acct.Users[2].Permissions(nil)
	for subj, want := range map[string]bool{
		"$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_web": true, "$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS": true,
		"$JS.API.STREAM.MSG.GET.OBJ_AX_OBJECTS_gpu": false,
	} {
		if got := allowed(alone.Publish, subj); got != want {
			t.Errorf("web alone may publish %s: %v, want %v", subj, got, want)
		}
	}
	shop := acct.Users[3].Permissions(acct.Capabilities())
	for _, c := range acct.Capabilities() {
		if subj := "$JS.API.STREAM.MSG.GET.OBJ_" + subject.ObjectBucket(c); !allowed(shop.Publish, subj) {
			t.Errorf("shop may not read %s", subj)
		}
	}
}

func TestProducerOptions(t *testing.T) {
	p := permission.User{Name: "shop", Role: permission.Producer, Types: []string{"order.>"}, Cancel: true}.Permissions(nil)
	for subj, want := range map[string]bool{
		subject.SubmitLane(3, "order.create"):                         true,
		subject.Submit("order.create"):                                true,
		subject.SubmitLane(3, "email.send"):                           false,
		subject.GraphSubmit:                                           false,
		subject.CommandAs("shop", subject.CommandCancel, "x"):         true,
		subject.CommandAs("shop", subject.CommandRedrive, "x"):        false,
		subject.CommandAs("shop", subject.CommandCancel, "a/shard/1"): true,
		subject.CommandAs("alice", subject.CommandCancel, "x"):        false,
		subject.Command(subject.CommandCancel, "x"):                   false,
	} {
		if got := allowed(p.Publish, subj); got != want {
			t.Errorf("producer shop may publish %s: %v, want %v", subj, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, u := range []permission.User{
		{Name: "", Role: permission.Producer},
		{Name: "a.b", Role: permission.Producer},
		{Name: "e", Role: permission.Executor, Types: []string{"x.>"}},
		{Name: "e", Role: permission.Executor, Capability: "email"},
		{Name: "e", Role: permission.Executor, Capability: "em.ail", Types: []string{"x"}},
		{Name: "e", Role: permission.Executor, Capability: "email", Types: []string{"x.>.y"}},
		{Name: "o", Role: permission.Operator, Cancel: true},
		{Name: "m", Role: permission.Mirror, Types: []string{"x"}},
		{Name: "x", Role: "admin"},
	} {
		if err := u.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", u)
		}
	}
	dup := permission.Account{Users: []permission.User{{Name: "o", Role: permission.Orchestrator}, {Name: "o", Role: permission.Mirror}}}
	if err := dup.Validate(); err == nil {
		t.Error("duplicate user names accepted")
	}
	if err := (permission.Account{Users: []permission.User{{Name: "p", Role: permission.Producer}}}).Validate(); err == nil {
		t.Error("an account without an orchestrator accepted")
	}
	if err := permission.Sample().Validate(); err != nil {
		t.Errorf("sample: %v", err)
	}
}

// TestOrchestratorWritesEveryStream: the orchestrator owns the topology,
// so it may publish on every subject of every stream AX declares — a
// stream added later without a line in the matrix fails here, not in a
// deployment.
func TestOrchestratorWritesEveryStream(t *testing.T) {
	var orch permission.Permissions
	acct := permission.Sample()
	for _, u := range acct.Users {
		if u.Role == permission.Orchestrator {
			orch = u.Permissions(acct.Capabilities())
		}
	}
	for _, sc := range topology.Streams(topology.Options{}) {
		for _, subj := range sc.Subjects {
			probe := strings.NewReplacer(">", "x", "*", "x").Replace(subj)
			if !allowed(orch.Publish, probe) {
				t.Errorf("stream %s: the orchestrator may not publish on %s", sc.Name, subj)
			}
		}
	}
}

// TestEventPermissions: who may publish events (ax.event.>) and decide
// event tasks (approve, reject). The orchestrator and operators publish
// any event, a producer not limited to types any by default, one limited
// to types none, an executor none; Events narrows a producer's to its
// subjects, grants an executor some, or (empty) takes them away. Only
// operators may approve or reject.
func TestEventPermissions(t *testing.T) {
	users := map[string]permission.Permissions{}
	acct := permission.Sample()
	acct.Users = append(acct.Users,
		permission.User{Name: "psp", Role: permission.Producer, Events: []string{"payment.>", "refund.*.eu"}},
		permission.User{Name: "quiet", Role: permission.Producer, Events: []string{}},
		permission.User{Name: "typed-events", Role: permission.Producer, Types: []string{"order.>"}, Events: []string{"order.*"}},
		permission.User{Name: "executor-bill", Role: permission.Executor, Capability: "bill", Types: []string{"bill.>"}, Events: []string{"invoice.sent.*"}},
	)
	if err := acct.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, u := range acct.Users {
		users[u.Name] = u.Permissions(acct.Capabilities())
	}
	for _, c := range []struct {
		user, subj string
		want       bool
	}{
		{"orchestrator", subject.Event("payment.received.o1"), true},
		{"operator", subject.Event("payment.received.o1"), true},
		{"console", subject.Event("approval.order.o1"), true},
		{"producer", subject.Event("payment.received.o1"), true},
		{"producer-email", subject.Event("payment.received.o1"), false},
		{"executor-email", subject.Event("payment.received.o1"), false},
		{"mirror", subject.Event("payment.received.o1"), false},
		{"psp", subject.Event("payment.received.o1"), true},
		{"psp", subject.Event("refund.done.eu"), true},
		{"psp", subject.Event("refund.done.us"), false},
		{"psp", subject.Event("order.shipped.o1"), false},
		{"quiet", subject.Event("payment.received.o1"), false},
		{"quiet", subject.Submit("x"), true},
		{"typed-events", subject.Event("order.o1"), true},
		{"typed-events", subject.Event("payment.received.o1"), false},
		{"executor-bill", subject.Event("invoice.sent.o1"), true},
		{"executor-bill", subject.Event("payment.received.o1"), false},
		// Approvals are commands: operators only, under their own name.
		{"operator", subject.CommandAs("operator", subject.CommandApprove, "o1"), true},
		{"operator", subject.CommandAs("operator", subject.CommandReject, "o1"), true},
		{"operator", subject.CommandAs("console", subject.CommandApprove, "o1"), false},
		{"producer", subject.CommandAs("producer", subject.CommandApprove, "o1"), false},
		{"producer", subject.Command(subject.CommandApprove, "o1"), false},
		{"psp", subject.CommandAs("psp", subject.CommandApprove, "o1"), false},
		{"executor-email", subject.CommandAs("executor-email", subject.CommandApprove, "o1"), false},
		{"executor-email", subject.Command(subject.CommandReject, "o1"), false},
	} {
		if got := allowed(users[c.user].Publish, c.subj); got != c.want {
			t.Errorf("%s may publish %s: %v, want %v", c.user, c.subj, got, c.want)
		}
	}
	for _, u := range []permission.User{
		{Name: "o", Role: permission.Operator, Events: []string{"x.>"}},
		{Name: "m", Role: permission.Mirror, Events: []string{}},
		{Name: "p", Role: permission.Producer, Events: []string{"a.>.b"}},
		{Name: "p", Role: permission.Producer, Events: []string{"a b"}},
		{Name: "p", Role: permission.Producer, Events: []string{"a.b.c.d.e.f.g.h.i"}},
	} {
		if err := u.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", u)
		}
	}
}
