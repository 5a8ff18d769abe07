// Package permission is AX's least-privilege matrix: what the NATS user of
// each role may publish and subscribe to, built from internal/subject's
// names, and the nats-server accounts configuration that enforces it.
// deploy/security/accounts.conf is generated from here (`ax nats-accounts`),
// and the e2e security test runs AX under the same rules.
//
// The roles:
//
//   - orchestrator: the only writer of task records, timers, dead letters
//     and topology (streams, buckets, consumers of its own); it answers
//     commands and claims. `ax topology` and `ax poison redrive` run with
//     its credentials.
//   - executor of capability C: creates and pulls only C's ready consumers
//     (their names and filter subjects are in its rights, so it cannot
//     create one on another capability's dispatches), reports on the
//     completed subjects of the task types it serves, renews leases, stores
//     plans and large results in its capability's object store
//     (AX_OBJECTS_<C>, and no other), asks the orchestrator to claim an
//     attempt on its capability's claim subject, and listens to cancel
//     signals, and announces itself in the workers registry under its
//     capabilities' keys (AX_WORKERS). It reads task records, leases, fan-in markers and every
//     capability's objects (upstream results). It writes no record and no
//     stream configuration, and publishes no event unless its Events grant
//     some (a handler that signals what it did).
//   - producer: submits (on every intake lane, or only for some types),
//     reads task state and results, and cancels only when granted. A
//     producer not limited to types also publishes events (ax.event.>,
//     sdk.Client.Signal) unless its Events narrow them; one limited to
//     types publishes only the events its Events grant.
//   - mirror: reads AX_TASKS through its durable consumer; writes nothing.
//   - operator (the CLI's operator commands and the console): sends
//     commands (approving or rejecting event tasks included: only
//     operators may), publishes events (ax.event.>), records operator
//     audit events, resubmits (re-run, a
//     schedule fired by hand) and reads everything but the queues'
//     messages (pauses, breakers and key limits in AX_CONTROL, the
//     concurrency slots in AX_SLOTS and the workers registry AX_WORKERS
//     included).
//
// Every user receives replies only on its own inboxes, _INBOX.<user>.>: a
// client of that user must connect with that inbox prefix (--inbox-prefix,
// NATS_INBOX_PREFIX, or a context's inbox_prefix). A user allowed to
// subscribe to _INBOX.> could read every reply in the account: every
// other user's pulled messages, dispatches and payloads included.
package permission

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Role names what a NATS user does for AX.
type Role string

// The roles of AX's NATS users.
const (
	Orchestrator Role = "orchestrator"
	Executor     Role = "executor"
	Producer     Role = "producer"
	Mirror       Role = "mirror"
	Operator     Role = "operator"
)

// Roles lists every role.
var Roles = []Role{Orchestrator, Executor, Producer, Mirror, Operator}

// User is one NATS user of the AX account.
type User struct {
	// Name is the NATS user name; its clients' inboxes are InboxPrefix().
	Name string
	// Role is what the user does.
	Role Role
	// Capability is the capability an executor serves (one per user:
	// give an executor serving several a user per capability, or list
	// them in Capabilities).
	Capability string
	// Capabilities are further capabilities of an executor.
	Capabilities []string
	// Types are the task types an executor reports (subject patterns:
	// "email.send", "email.>") or a producer submits (empty: any type).
	// A producer limited to types cannot submit graphs (a graph's types
	// are not in its subject).
	Types []string
	// Cancel lets a producer cancel tasks (any task: commands are not
	// scoped to the tasks a producer submitted).
	Cancel bool
	// Publish are further subjects the user may publish, for what AX does
	// not know about: an executor whose handlers submit tasks needs the
	// submit subjects.
	Publish []string
	// Events are the event subjects (sdk.Client.Signal, without the
	// ax.event. prefix; patterns such as "payment.>" or
	// "payment.received.*") a producer or an executor may publish. Nil:
	// the role's default — every event for a producer not limited to
	// types, none for one limited to types and for an executor. Empty and
	// not nil: none.
	Events []string
}

// Rules allow and deny subjects; a denied subject is refused even when an
// allowed pattern matches it.
type Rules struct {
	Allow []string
	Deny  []string
}

// Permissions are a NATS user's publish and subscribe rules.
type Permissions struct {
	Publish   Rules
	Subscribe Rules
	// AllowResponses lets the user answer the requests it received
	// (nats-server's allow_responses).
	AllowResponses bool
}

// InboxPrefix is the prefix of the user's reply inboxes: "_INBOX.<name>".
func (u User) InboxPrefix() string { return subject.ReplyInbox + "." + u.Name }

// Validate checks the user's fields for its role.
func (u User) Validate() error {
	switch u.Role {
	case Executor:
		caps := u.capabilities()
		if len(caps) == 0 {
			return fmt.Errorf("user %s: an executor needs a capability", u.Name)
		}
		for _, c := range caps {
			if !task.ValidCapability(c) {
				return fmt.Errorf("user %s: invalid capability %q", u.Name, c)
			}
		}
		if len(u.Types) == 0 {
			return fmt.Errorf("user %s: an executor needs the task types it reports (e.g. %q)", u.Name, "email.>")
		}
	case Producer:
	case Orchestrator, Mirror, Operator:
		if len(u.Types) > 0 || u.Capability != "" || len(u.Capabilities) > 0 {
			return fmt.Errorf("user %s: a %s has no capability or types", u.Name, u.Role)
		}
	default:
		return fmt.Errorf("user %s: unknown role %q", u.Name, u.Role)
	}
	if !validToken(u.Name) {
		return fmt.Errorf("user %q: the name must be one subject token of [A-Za-z0-9_-]", u.Name)
	}
	if u.Cancel && u.Role != Producer {
		return fmt.Errorf("user %s: only a producer takes Cancel (an operator may always cancel)", u.Name)
	}
	if u.Events != nil && u.Role != Producer && u.Role != Executor {
		return fmt.Errorf("user %s: only a producer or an executor takes Events (an operator and the orchestrator publish every event, the mirror none)", u.Name)
	}
	for _, e := range u.Events {
		if !validPattern(e) || strings.Count(e, ".") >= task.MaxEventSubjectTokens+1 {
			return fmt.Errorf("user %s: invalid event subject pattern %q (dot-separated tokens of [A-Za-z0-9_-], \"*\", a final \">\"; at most %d tokens)", u.Name, e, task.MaxEventSubjectTokens+1)
		}
	}
	for _, t := range u.Types {
		if !validPattern(t) {
			return fmt.Errorf("user %s: invalid type pattern %q", u.Name, t)
		}
	}
	return nil
}

func (u User) capabilities() []string {
	var out []string
	if u.Capability != "" {
		out = append(out, u.Capability)
	}
	return append(out, u.Capabilities...)
}

// Permissions returns the user's rights (see the package doc).
// capabilities are the account's (Account.Capabilities): the
// capabilities whose object stores, AX_OBJECTS_<capability>, its readers
// may read — a stream name is one subject token, so a right cannot name
// them all with a wildcard, and each is listed. An executor's own
// capabilities are added to them.
func (u User) Permissions(capabilities []string) Permissions {
	ready := readyConsumers(capabilities)
	objects := objectBuckets(append(slices.Clone(capabilities), u.capabilities()...))
	var p Permissions
	switch u.Role {
	case Orchestrator:
		p = orchestrator(objects)
	case Executor:
		p = executor(u.capabilities(), u.Types, objects)
	case Producer:
		p = producer(u.Name, u.Types, u.Cancel, objects, ready)
	case Mirror:
		p = mirror(ready)
	case Operator:
		p = operator(u.Name, objects, ready)
	}
	switch {
	case u.Role != Producer && u.Role != Executor:
	case u.Events != nil:
		for _, e := range u.Events {
			p.Publish.Allow = append(p.Publish.Allow, subject.Event(e))
		}
	case u.Role == Producer && len(u.Types) == 0:
		// Events that event tasks wait for (sdk.Client.Signal).
		p.Publish.Allow = append(p.Publish.Allow, subject.EventAll)
	}
	p.Subscribe.Allow = append([]string{u.InboxPrefix() + ".>"}, p.Subscribe.Allow...)
	p.Publish.Allow = append(p.Publish.Allow, u.Publish...)
	return p
}

// JetStream API subjects.
const (
	jsAPI = "$JS.API."
	// streamInfoAll: every AX process checks AX's topology at start
	// (topology.Check: the info of every stream, bucket and object store).
	streamInfoAll = jsAPI + "STREAM.INFO.*"
)

func kvStream(bucket string) string  { return "KV_" + bucket }
func objStream(bucket string) string { return "OBJ_" + bucket }
func kvAll(bucket string) string     { return "$KV." + bucket + ".>" }

// objPut are the subjects of writing objects: chunks and their meta entry.
func objPut(bucket string) []string {
	return []string{"$O." + bucket + ".C.>", "$O." + bucket + ".M.>"}
}

// objectBuckets are AX's object stores: the legacy AX_OBJECTS (records
// written before per-capability stores name objects there) and each
// capability's, sorted.
func objectBuckets(capabilities []string) []string {
	out := []string{subject.BucketObjects}
	for _, c := range sorted(capabilities) {
		out = append(out, subject.ObjectBucket(c))
	}
	return out
}

// objStreams are the streams of object stores.
func objStreams(buckets []string) []string {
	out := make([]string, len(buckets))
	for i, b := range buckets {
		out[i] = objStream(b)
	}
	return out
}

func msgGet(stream string) string { return jsAPI + "STREAM.MSG.GET." + stream }

// consumerCreate is the creation (or update) of a consumer with one filter
// subject: the server refuses a request whose configuration has another
// filter than the subject's.
func consumerCreate(stream, consumer, filter string) string {
	return jsAPI + "CONSUMER.CREATE." + stream + "." + consumer + "." + filter
}
func consumerNext(stream, consumer string) string {
	return jsAPI + "CONSUMER.MSG.NEXT." + stream + "." + consumer
}
func consumerInfo(stream, consumer string) string {
	return jsAPI + "CONSUMER.INFO." + stream + "." + consumer
}
func consumerDelete(stream, consumer string) string {
	return jsAPI + "CONSUMER.DELETE." + stream + "." + consumer
}
func ack(stream, consumer string) string { return "$JS.ACK." + stream + "." + consumer + ".>" }

// durables are the durable consumers of each stream other than a queue
// (whose consumers no reader gets), with the role that owns them: a reader
// may not create, update, pull from or delete another role's durable.
var durables = map[string]map[string]Role{
	subject.StreamTasks: {subject.ConsumerMirror: Mirror},
}

// readyConsumers are the ready consumers on AX_TASKS of the account's
// capabilities: the executors', denied to the stream's readers.
func readyConsumers(capabilities []string) []string {
	var out []string
	for _, c := range capabilities {
		for lvl := range subject.Priorities {
			out = append(out, subject.ReadyConsumer(c, lvl))
		}
	}
	return out
}

// read lets a role read a stream: single messages (leader reads, and the
// direct gets AX_TASKS allows while it has one replica), and
// short-lived ordered consumers (internal/scan, nats.go's key-value and
// object-store readers) with their flow-control replies. Another role's
// durable consumers on the stream are denied, and on AX_TASKS the ready
// consumers named (the executors').
func read(p *Permissions, self Role, ready []string, streams ...string) {
	for _, s := range streams {
		p.Publish.Allow = append(p.Publish.Allow,
			msgGet(s),
			jsAPI+"DIRECT.GET."+s, jsAPI+"DIRECT.GET."+s+".>",
			jsAPI+"CONSUMER.CREATE."+s+".*",
			jsAPI+"CONSUMER.CREATE."+s+".*.>",
			consumerNext(s, "*"),
			consumerInfo(s, "*"),
			consumerDelete(s, "*"),
			"$JS.FC."+s+".>",
		)
		denied := []string{}
		for name, owner := range durables[s] {
			if owner != self {
				denied = append(denied, name)
			}
		}
		if s == subject.StreamTasks {
			denied = append(denied, ready...) // the executors' dispatches
		}
		slices.Sort(denied)
		for _, name := range denied {
			p.Publish.Deny = append(p.Publish.Deny,
				jsAPI+"CONSUMER.CREATE."+s+"."+name,
				jsAPI+"CONSUMER.CREATE."+s+"."+name+".>",
				consumerNext(s, name),
				consumerDelete(s, name),
			)
		}
	}
}

func orchestrator(objects []string) Permissions {
	var p Permissions
	p.Publish.Allow = []string{
		// Topology, its own consumers, reads, purges (trimming, retention).
		jsAPI + ">", "$JS.ACK.>", "$JS.FC.>",
	}
	p.Publish.Allow = append(p.Publish.Allow, subject.SubmitSubjects()...) // poison re-drives
	p.Publish.Allow = append(p.Publish.Allow,
		subject.ReadyAll, subject.CompletedAll, // dispatches; poison re-drives of reports
		subject.TaskAll, subject.TimerAll, subject.FireAll, subject.CommandAll, subject.DLQAll,
		subject.RejectedAll, subject.HeldAll, subject.AuditAll, subject.BellAll,
		subject.FanInAll, subject.EdgeAll, subject.CountAll, subject.LeaseAll, subject.UniqueAll,
		subject.PoisonAll, subject.TaskTypeAll,
		subject.SlotWaitAll,  // tasks waiting for a concurrency slot (AX_HELD)
		subject.EventWaitAll, // event tasks waiting for their events (AX_HELD)
		subject.EventAll,     // events (AX_EVENTS): not published by AX itself
		subject.FairOwnerAll, // asking the orchestrator holding a task queued for fairness
		kvAll(subject.BucketSchedules), kvAll(subject.BucketControl), kvAll(subject.BucketRetryWindows),
		kvAll(subject.BucketSlots),   // concurrency slots per key
		kvAll(subject.BucketRevoked), // executions of cancelled and expired tasks
		kvAll(subject.BucketKeys),    // the execution-token key: orchestrators only
		kvAll(subject.BucketWorkers),
		// Command replies (Ax-Reply-To: another user's inbox).
		subject.ReplyInbox+".>",
	)
	// The object stores it owns (it reads them through $JS.API).
	for _, b := range objects {
		p.Publish.Allow = append(p.Publish.Allow, "$O."+b+".>")
	}
	p.Subscribe.Allow = []string{subject.ClaimAll, subject.InputsAll, subject.DirectAll, subject.DirectToAll, subject.StateAll, subject.FairOwnerAll}
	p.AllowResponses = true // claim and direct-request replies
	return p
}

func executor(capabilities, types, objects []string) Permissions {
	var p Permissions
	// No read of AX_TASKS: a dispatch is the ready record itself, with
	// its execution token in a header, so an executor reads only the
	// dispatches its capabilities' ready consumers deliver to it (and
	// asks the orchestrators for its task's inputs). (Leases are the
	// orchestrator's to read.)
	p.Publish.Allow = []string{streamInfoAll}
	for _, c := range capabilities {
		for lvl := range subject.Priorities {
			name := subject.ReadyConsumer(c, lvl)
			p.Publish.Allow = append(p.Publish.Allow,
				consumerCreate(subject.StreamTasks, name, subject.DispatchFilter(c, lvl)),
				consumerNext(subject.StreamTasks, name),
				ack(subject.StreamTasks, name),
			)
		}
		p.Publish.Allow = append(p.Publish.Allow, subject.Claim(c), subject.Inputs(c), subject.LeaseCapability(c))
		// Its announcement in the workers registry, under its
		// capability's keys only (subject.WorkerKey): it cannot pass
		// itself off as another capability's executor.
		p.Publish.Allow = append(p.Publish.Allow, subject.KVKey(subject.BucketWorkers, subject.WorkerKeyCapability(c)))
		// Plans and large results, in its capability's object store only:
		// another capability's objects (and AX_OBJECTS) it may not write,
		// replace or roll up.
		p.Publish.Allow = append(p.Publish.Allow, objPut(subject.ObjectBucket(c))...)
		// The doorbell: a core subscription woken by new dispatches; an
		// executor rings its own capability's when it passes on a task
		// it has no handler for (a wake-up of its peers, nothing more).
		p.Subscribe.Allow = append(p.Subscribe.Allow, subject.BellCapability(c))
		p.Publish.Allow = append(p.Publish.Allow, subject.BellCapability(c))
	}
	for _, t := range types {
		// Its reports: stored, handed to any orchestrator directly, or
		// to the one that dispatched the attempt (subject.DirectTo).
		completed := subject.Completed(t)
		p.Publish.Allow = append(p.Publish.Allow, withDirect(completed)...)
		p.Publish.Allow = append(p.Publish.Allow,
			subject.DirectTo("*", subject.Direct(completed)), subject.DirectTo("*", subject.DirectBatch(completed)))
	}
	// Aggregators read their shards' markers; handlers read upstream
	// results (of any capability) and their own job's objects.
	// Revoked executions: watched (their capabilities' keys).
	read(&p, Executor, nil, append([]string{subject.StreamFanIn, kvStream(subject.BucketRevoked)}, objStreams(objects)...)...)
	return p
}

// submitSubjects are the subjects a role submitting types (all: none
// given) publishes: each stored one and its direct request.
func submitSubjects(types []string) []string {
	if len(types) == 0 {
		return withDirect(subject.SubmitSubjects()...)
	}
	var out []string
	for _, t := range types {
		out = append(out, subject.Submit(t))
		for lvl := range subject.Priorities {
			out = append(out, subject.SubmitLane(lvl, t))
		}
	}
	return withDirect(out...)
}

// withDirect returns subjects and, for each, its direct request
// (subject.Direct) and its batch direct request (subject.DirectBatch): the
// right to store a message and to hand it to the orchestrators directly go
// together.
func withDirect(subjects ...string) []string {
	out := make([]string, 0, 3*len(subjects))
	for _, s := range subjects {
		out = append(out, s, subject.Direct(s), subject.DirectBatch(s))
	}
	return out
}

func producer(name string, types []string, cancel bool, objects, ready []string) Permissions {
	var p Permissions
	p.Publish.Allow = append(submitSubjects(types), streamInfoAll)
	if len(types) == 0 {
		// Task state and results: records, histories and Wait (AX_TASKS),
		// dependents (AX_EDGES), shard progress (AX_FANIN, AX_COUNTS),
		// results kept as objects; rejections.
		read(&p, Producer, ready, append([]string{subject.StreamTasks, subject.StreamEdges, subject.StreamFanIn, subject.StreamCounts},
			objStreams(objects)...)...)
		p.Publish.Allow = append(p.Publish.Allow, msgGet(subject.StreamRejected), subject.StateAll)
	} else {
		// Limited to types: the state of its types' tasks only, asked of
		// an orchestrator (sdk.Client.State), which answers a task or a
		// rejection only when it has the subject's type. Stream reads
		// cannot be scoped by type: none.
		for _, t := range types {
			p.Publish.Allow = append(p.Publish.Allow, subject.StatePattern(t))
		}
		read(&p, Producer, nil, objStreams(objects)...)
	}
	// A resubmission clears its id's stale rejection.
	p.Publish.Allow = append(p.Publish.Allow, jsAPI+"STREAM.PURGE."+subject.StreamRejected)
	p.Publish.Allow = append(p.Publish.Allow, subject.OutboxNotify) // outbox.Notify
	p.Subscribe.Allow = []string{subject.OutboxNotify}              // the outbox relay
	if cancel {
		// Under its own name only (sdk.Client.Caller): the orchestrator
		// records who cancelled, and the server vouches for it.
		p.Publish.Allow = append(p.Publish.Allow, subject.CommandAs(name, subject.CommandCancel, ">"))
	}
	return p
}

func mirror(ready []string) Permissions {
	var p Permissions
	p.Publish.Allow = []string{
		streamInfoAll,
		consumerCreate(subject.StreamTasks, subject.ConsumerMirror, subject.TaskAll),
		consumerInfo(subject.StreamTasks, subject.ConsumerMirror),
		ack(subject.StreamTasks, subject.ConsumerMirror),
	}
	read(&p, Mirror, ready, subject.StreamTasks) // pulls; `ax audit rebuild`
	return p
}

func operator(name string, objects, ready []string) Permissions {
	var p Permissions
	p.Publish.Allow = append(submitSubjects(nil), // re-run, a schedule fired by hand
		// Commands under its own name only (`ax --as <name>`,
		// sdk.Client.Caller): the orchestrator records the name, and the
		// server vouches for it.
		subject.CommandAs(name, "*", ">"),
		subject.Audit(auditOperator, ">"),
		subject.EventAll, // events (sdk.Client.Signal)
		streamInfoAll,
		jsAPI+"INFO", jsAPI+"STREAM.NAMES", jsAPI+"STREAM.LIST",
		jsAPI+"CONSUMER.INFO.*.*", jsAPI+"CONSUMER.NAMES.*", jsAPI+"CONSUMER.LIST.*", // backlogs, lag
		jsAPI+"STREAM.PURGE."+subject.StreamRejected,
	)
	read(&p, Operator, ready, append([]string{subject.StreamTasks, subject.StreamEdges, subject.StreamFanIn, subject.StreamCounts,
		subject.StreamDLQ, subject.StreamRejected, subject.StreamHeld, subject.StreamAudit, subject.StreamPoison,
		kvStream(subject.BucketSchedules), kvStream(subject.BucketControl), kvStream(subject.BucketSlots),
		kvStream(subject.BucketWorkers)}, objStreams(objects)...)...)
	return p
}

// auditOperator is sdk.AuditOperator (the sdk imports this module's
// internals, not the other way round).
const auditOperator = "operator"

// validToken accepts one subject token of 1–64 of [A-Za-z0-9_-] (a
// capability's form).
func validToken(s string) bool { return task.ValidCapability(s) }

// validPattern accepts a task type, or one with wildcard tokens ("*", and
// ">" last).
func validPattern(s string) bool {
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		switch {
		case tok == "*":
		case tok == ">" && i == len(toks)-1:
		case !validToken(tok):
			return false
		}
	}
	return true
}

// sorted returns a copy of list sorted and without duplicates.
func sorted(list []string) []string {
	out := slices.Clone(list)
	slices.Sort(out)
	return slices.Compact(out)
}
