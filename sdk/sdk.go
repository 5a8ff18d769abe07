package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/direct"
	"github.com/ax-run/ax/internal/edges"
	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// ErrNotFound means no task (and no rejection) has that id.
var ErrNotFound = errors.New("task not found")

// ErrNoTopology means AX's streams do not exist: no orchestrator has
// created them yet. Only the orchestrator creates or changes them.
var ErrNoTopology = topology.ErrMissing

// ErrDigestMismatch means a large result read from its object store
// (Result) is not the bytes its executor reported: it was overwritten
// after the report. The error names the object and its store.
var ErrDigestMismatch = object.ErrDigestMismatch

// RejectedError is returned for a submission the orchestrator refused.
type RejectedError struct {
	// Rejection is the orchestrator's record of the refusal: the id, the
	// reason and the input.
	Rejection task.Rejection
}

// Error names the task and the reason it was refused.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("task %s rejected: %s", e.Rejection.ID, e.Rejection.Reason)
}

// Client talks to AX through NATS. It is safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	store    *store.Store
	objects  *object.Stores
	ownsConn bool
	// direct hands submissions to the orchestrators before storing them.
	direct *direct.Sender
	// batches groups concurrent Submits into batch direct requests.
	batches *direct.Batcher
	// MaxPayload is checked client-side before submitting. Default 256 KiB.
	// With a Codec it bounds the encoded payload, as the orchestrator does.
	MaxPayload int
	// Codec, when set, encodes the payload of every task the client
	// submits (Submit, SubmitMany, SubmitGraph, a Submitter's tasks and a
	// schedule's template) and decodes the payloads it reads back (Get,
	// Wait, History, DeadLetters, Schedule, Schedules and the tasks
	// commands return); a payload it did not encode is read as it is.
	// Executors need the same codec (executor.Config.Codec). Results are
	// not encoded. Set it before the client is used. Default nil: payloads
	// travel as given.
	Codec codec.Codec
	// Caller, when set, names who sends the client's commands (cancel,
	// re-drive, pause, schedules): they go to ax.cmd.as.<Caller>.<kind>.<id>
	// and the orchestrator records the name with what they change. Under
	// the per-user permissions of deploy/security a user may send commands
	// only under its own name, so the name is vouched for by the NATS
	// server. One subject token: no dots, wildcards or white space.
	Caller string
}

// Connect dials NATS at url and returns a client that closes the connection
// on Close.
func Connect(ctx context.Context, url string, opts ...nats.Option) (*Client, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("ax-sdk"), nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, natsconn.RedactError(fmt.Errorf("connect to %s: %w", natsconn.Redact(url), err), url)
	}
	c, err := New(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.ownsConn = true
	return c, nil
}

// New returns a client on an existing connection. AX's streams must exist
// (an orchestrator creates them): otherwise New returns an error wrapping
// ErrNoTopology.
func New(ctx context.Context, nc *nats.Conn) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := topology.Check(ctx, js); err != nil {
		return nil, err
	}
	st, err := store.New(ctx, js)
	if err != nil {
		return nil, err
	}
	d := direct.New(nc, nil)
	return &Client{nc: nc, js: js, store: st, objects: object.New(js), direct: d, batches: direct.NewBatcher(d)}, nil
}

// Close closes the connection if the client opened it.
func (c *Client) Close() {
	c.batches.Close()
	if c.ownsConn {
		c.nc.Close()
	}
}

// Conn returns the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// prepare fills defaults and an id, validates a spec and encodes its
// payload with the client's codec.
func (c *Client) prepare(ctx context.Context, s *task.Spec) error {
	if s.ID == "" {
		s.ID = task.NewID()
	}
	s.Normalize()
	if err := s.Validate(c.MaxPayload); err != nil {
		return fmt.Errorf("%w task %s: %w", ErrInvalid, s.ID, err)
	}
	return c.encodeSpec(ctx, s)
}

// Submit validates spec, fills its defaults and id (a sortable unique id when
// empty) and hands it to the orchestrators: directly (a request on
// ax.direct.task.submit…, answered once an orchestrator created the task or
// recorded its rejection, taking at most half of ctx's time), or, when none
// answers so, stored on task.submit-p<N>.<type>. It returns once the task
// exists or JetStream has stored the submission: either way the task will
// not be lost. Submitting an id again never creates a second task; submitting an id whose earlier
// submission was rejected has it evaluated anew. Fields left unset take
// their defaults (see task.Spec).
func (c *Client) Submit(ctx context.Context, spec task.Spec) (string, error) {
	if err := c.prepare(ctx, &spec); err != nil {
		return "", err
	}
	data, err := wirejson.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("encode task %s: %w", spec.ID, err)
	}
	return spec.ID, c.publishSpec(ctx, subject.SubmitLane(spec.PriorityLevel(), spec.Type), spec.ID, data)
}

// publishSpec hands a prepared spec's body to the orchestrators directly
// (one creates the task, or records its rejection, before it answers), or
// else publishes it on subj and waits for JetStream to store it; a body
// JetStream de-duplicated is handled by resubmitIfRejected.
func (c *Client) publishSpec(ctx context.Context, subj, id string, data []byte) error {
	msg := submission(ctx, subj, data)
	if taskType, ok := subject.TypeFromSubmit(subj); ok && len(msg.Header) == 0 {
		// With other submissions of its type sent at the same moment, in
		// one request (a trace context needs a request of its own).
		if c.batches.Send(ctx, subject.Submit(taskType), data) {
			return nil
		}
	} else if ok, _ := c.direct.Send(ctx, msg); ok {
		return nil
	}
	ack, err := c.js.PublishMsg(ctx, submission(ctx, subj, data), jetstream.WithMsgID(msgID(id, data)))
	if err != nil {
		return fmt.Errorf("submit task %s: %w", id, err)
	}
	if ack.Duplicate {
		return c.resubmitIfRejected(ctx, subj, id, data)
	}
	return nil
}

// msgID de-duplicates retries of one submission (JetStream's window): the
// task id and a hash of the spec, so a corrected spec with the same id is
// not mistaken for a retry. Idempotency of ids is the orchestrator's.
func msgID(id string, data []byte) string {
	h := fnv.New64a()
	_, _ = h.Write(data)
	return id + ":" + strconv.FormatUint(h.Sum64(), 36)
}

// resubmitIfRejected handles a submission JetStream de-duplicated. If the
// id's earlier submission was rejected, this one is published again under a
// fresh message id, after removing the stale rejection, so the orchestrator
// evaluates it anew (a missing dependency may exist by now). If the task
// exists, or the earlier submission is still being handled, nothing is done.
//
// An orchestrator is asked first (State: all a producer limited to task
// types may read); without an answer the streams are read.
func (c *Client) resubmitIfRejected(ctx context.Context, subj, id string, data []byte) error {
	rej, err := c.rejectedBefore(ctx, subj, id)
	if err != nil || rej == nil {
		return err
	}
	st, err := c.js.Stream(ctx, subject.StreamRejected)
	if err != nil {
		return fmt.Errorf("resubmit %s: %w", id, err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject.Rejected(id, ""))); err != nil {
		return fmt.Errorf("resubmit %s: clear its rejection: %w", id, err)
	}
	if _, err := c.js.Publish(ctx, subj, data, jetstream.WithMsgID(msgID(id, data)+":"+nuid.Next())); err != nil {
		return fmt.Errorf("resubmit %s: %w", id, err)
	}
	return nil
}

// SubmitGraph submits several tasks with their edges (depends_on) at once:
// the orchestrator validates the whole graph (cycles, unknown dependencies)
// and creates all of it or rejects all of it. It returns the ids in order.
func (c *Client) SubmitGraph(ctx context.Context, specs []task.Spec) ([]string, error) {
	ids := make([]string, len(specs))
	for i := range specs {
		if err := c.prepare(ctx, &specs[i]); err != nil {
			return nil, err
		}
		ids[i] = specs[i].ID
	}
	g := task.Graph{Tasks: specs}
	if _, err := g.Sorted(c.MaxPayload); err != nil {
		return nil, fmt.Errorf("%w graph: %w", ErrInvalid, err)
	}
	data, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("encode graph: %w", err)
	}
	if ok, _ := c.direct.Send(ctx, submission(ctx, subject.GraphSubmit, data)); ok {
		return ids, nil
	}
	if _, err := c.js.PublishMsg(ctx, submission(ctx, subject.GraphSubmit, data), jetstream.WithMsgID(msgID("graph-"+ids[0], data))); err != nil {
		return nil, fmt.Errorf("submit graph: %w", err)
	}
	return ids, nil
}

// Get returns a task's current record, with its Dependents listed. A
// submission that was refused gives a *RejectedError; an unknown id
// ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*task.Task, error) {
	t, _, err := c.store.Get(ctx, id)
	if err == nil {
		if err := c.decodeTask(ctx, &t); err != nil {
			return nil, err
		}
		if t.HasDependents {
			if t.Dependents, err = c.Dependents(ctx, id); err != nil {
				return nil, err
			}
		}
		return &t, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, c.denied(err)
	}
	if rej, err := store.Rejection(ctx, c.js, id); err != nil {
		return nil, err
	} else if rej != nil {
		return nil, &RejectedError{*rej}
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// Dependents lists the tasks that list id in their depends_on, sorted.
func (c *Client) Dependents(ctx context.Context, id string) ([]string, error) {
	e, err := edges.New(ctx, c.js)
	if err != nil {
		return nil, err
	}
	return e.Dependents(ctx, id)
}

// rejectedBefore returns the rejection of an earlier submission of id on
// subj, or nil when the task exists or there is none.
func (c *Client) rejectedBefore(ctx context.Context, subj, id string) (*task.Rejection, error) {
	if typ, ok := subject.TypeFromSubmit(subj); ok {
		// Briefly: this runs when no orchestrator took the submission
		// directly, and the caller's time is for the fallback too.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.State(sctx, typ, id)
		cancel()
		var rejected *RejectedError
		switch {
		case errors.As(err, &rejected):
			return &rejected.Rejection, nil
		case err == nil, errors.Is(err, ErrNotFound):
			return nil, nil
		}
	}
	if _, _, err := c.store.Get(ctx, id); err == nil {
		return nil, nil
	}
	return store.Rejection(ctx, c.js, id)
}

// History returns every event of a task, oldest first.
func (c *Client) History(ctx context.Context, id string) ([]task.HistoryEntry, error) {
	h, err := c.store.History(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return h, err
	}
	for i := range h {
		if err := c.decodeTask(ctx, &h[i].Event.Task); err != nil {
			return nil, fmt.Errorf("event %d: %w", h[i].Revision, err)
		}
	}
	return h, nil
}

// Wait blocks until the task reaches a terminal state (succeeded, failed,
// cancelled, expired) and returns it. It returns a *RejectedError if the
// submission was refused, or ctx's error. It reads the task streams: a
// producer whose user may read only some task types uses WaitState.
func (c *Client) Wait(ctx context.Context, id string) (*task.Task, error) {
	// NATS may not answer for a while (a node failing over, a leader
	// election): waiting is what the caller asked for, so transient errors
	// are waited out until ctx ends.
	backoff := 100 * time.Millisecond
	for {
		t, err := c.wait(ctx, id)
		if denied := c.denied(err); denied != err {
			return nil, denied
		}
		if err == nil || ctx.Err() != nil || !consume.Unavailable(err) {
			return t, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (c *Client) wait(ctx context.Context, id string) (*task.Task, error) {
	// The task's state first (one read): a task that ended is answered at
	// once, and an unfinished one is watched from its next event on — a
	// consumer that starts near the stream's end costs the server little,
	// where one that looks for the last message of each subject of the
	// task scans the stream.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.TaskHistory(id)},
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}
	seen := false
	switch t, rev, err := c.store.Get(ctx, id); {
	case err == nil && t.State.Terminal():
		return &t, c.decodeTask(ctx, &t)
	case err == nil:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, rev+1
		seen = true
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("watch task %s: %w", id, err)
	}
	cons, done, err := scan.Open(ctx, c.js, subject.StreamTasks, cfg)
	if err != nil {
		return nil, fmt.Errorf("watch task %s: %w", id, err)
	}
	defer done()
	for {
		wait := time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if wait <= 0 {
			return nil, ctx.Err()
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(wait))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			if !seen {
				if rej, err := store.Rejection(ctx, c.js, id); err != nil {
					return nil, err
				} else if rej != nil {
					return nil, &RejectedError{*rej}
				}
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("watch task %s: %w", id, err)
		}
		seen = true
		var ev task.Event
		if err := wirejson.Unmarshal(msg.Data(), &ev); err != nil {
			return nil, fmt.Errorf("decode task %s: %w", id, err)
		}
		// A task's history has a subject per kind of event: the last
		// message of each comes first, in stream order, and only the
		// newest of them (none pending after it) is the task's state.
		if md, err := msg.Metadata(); err == nil && md.NumPending > 0 {
			continue
		}
		if ev.Task.State.Terminal() {
			return &ev.Task, c.decodeTask(ctx, &ev.Task)
		}
	}
}

// Cancel asks the orchestrator to cancel a task and waits for its answer.
// A running task's handler has its context cancelled. A task submitted just
// before, still queued for intake, is cancelled once taken in: "not found"
// means no submission sent before the cancel carries that id.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*task.Task, error) {
	return c.command(ctx, subject.CommandCancel, id, reason)
}

// Redrive starts a fresh attempt series for a failed (dead-lettered) task.
// The dependents its failure cancelled stay cancelled unless WithDependents
// is given.
func (c *Client) Redrive(ctx context.Context, id string, opts ...RedriveOption) (*task.Task, error) {
	return c.command(ctx, subject.CommandRedrive, id, "", opts...)
}

// RedriveOption changes a re-drive.
type RedriveOption func(*task.CommandRequest)

// WithDependents re-opens, under the same ids, the dependents the task's
// failure cancelled, and theirs: each goes from cancelled back to waiting
// and runs once its upstreams allow, so a fixed pipeline continues. Their
// histories say which re-drive re-opened them and who asked (see By). On a
// task re-driven before without it, it only re-opens.
func WithDependents() RedriveOption {
	return func(r *task.CommandRequest) { r.WithDependents = true }
}

// By names who asks for the re-drive (an operator); the histories it
// writes record it.
func By(who string) RedriveOption {
	return func(r *task.CommandRequest) { r.By = who }
}

// command sends a durable command and waits for the orchestrator's reply.
// If ctx ends first the command stays queued and is still carried out.
func (c *Client) command(ctx context.Context, kind, id, reason string, opts ...RedriveOption) (*task.Task, error) {
	if !task.ValidID(id) {
		return nil, fmt.Errorf("%s: %w task id %q", kind, ErrInvalid, id)
	}
	req := task.CommandRequest{Reason: reason}
	for _, o := range opts {
		o(&req)
	}
	body, _ := json.Marshal(req)
	rep, err := c.send(ctx, kind, id, body)
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		return rep.Task, refused(kind, id, rep)
	}
	return rep.Task, nil
}

// send publishes a command with a reply inbox and waits for the reply.
func (c *Client) send(ctx context.Context, kind, id string, body []byte) (*task.CommandReply, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, id, err)
	}
	defer sub.Unsubscribe()
	subj := subject.Command(kind, id)
	if c.Caller != "" {
		if !subject.ValidCaller(c.Caller) {
			return nil, fmt.Errorf("%s %s: caller %q is not one subject token of at most 64 characters", kind, id, c.Caller)
		}
		subj = subject.CommandAs(c.Caller, kind, id)
	}
	msg := nats.NewMsg(subj)
	msg.Data = body
	msg.Header.Set(subject.HeaderReplyTo, inbox)
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, id, err)
	}
	resp, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s %s: no answer yet (the command stays queued): %w", kind, id, err)
	}
	var rep task.CommandReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		return nil, fmt.Errorf("%s %s: decode reply: %w", kind, id, err)
	}
	if rep.Task != nil {
		if err := c.decodeTask(ctx, rep.Task); err != nil {
			return &rep, fmt.Errorf("%s %s: done, but: %w", kind, id, err)
		}
	}
	if rep.Schedule != nil {
		if err := c.decodeSchedule(ctx, rep.Schedule); err != nil {
			return &rep, fmt.Errorf("%s %s: done, but: %w", kind, id, err)
		}
	}
	return &rep, nil
}

// DeadLetters lists the dead-letter queue.
func (c *Client) DeadLetters(ctx context.Context) ([]task.DeadLetter, error) {
	st, err := c.js.Stream(ctx, subject.StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("bind dead letters: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, done, err := scan.Open(ctx, c.js, subject.StreamDLQ, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("dead letters: %w", err)
	}
	defer done()
	var out []task.DeadLetter
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return out, fmt.Errorf("dead letters: %w", err)
		}
		var dl task.DeadLetter
		if err := json.Unmarshal(msg.Data(), &dl); err == nil {
			if err := c.decodeSpec(ctx, &dl.Spec); err != nil {
				return out, fmt.Errorf("dead letters: %w", err)
			}
			out = append(out, dl)
		}
		md, err := msg.Metadata()
		if err != nil || md.NumPending == 0 {
			return out, nil
		}
	}
}

// Rejections returns up to limit of the newest rejected submissions.
func (c *Client) Rejections(ctx context.Context, limit int) ([]task.Rejection, error) {
	st, err := c.js.Stream(ctx, subject.StreamRejected)
	if err != nil {
		return nil, fmt.Errorf("bind rejections: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("rejections: %w", err)
	}
	if info.State.Msgs == 0 || limit <= 0 {
		return nil, nil
	}
	start := uint64(1)
	if info.State.LastSeq > uint64(limit) {
		start = info.State.LastSeq - uint64(limit) + 1
	}
	cons, done, err := scan.Open(ctx, c.js, subject.StreamRejected, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return nil, fmt.Errorf("rejections: %w", err)
	}
	defer done()
	var out []task.Rejection
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return out, fmt.Errorf("rejections: %w", err)
		}
		var r task.Rejection
		if err := json.Unmarshal(msg.Data(), &r); err == nil {
			out = append(out, r)
		}
		md, err := msg.Metadata()
		if err != nil || md.NumPending == 0 {
			return out, nil
		}
	}
}

// directBatchesInFlight bounds the batch direct requests one SubmitMany
// has in flight.
const directBatchesInFlight = 4

// SubmitMany submits specs and returns their ids once each task exists or
// its submission is stored. They go to the orchestrators directly in batch
// requests of up to 256 specs of one type (a few in flight), so an
// orchestrator creates them before it answers and no submission is
// stored; those not taken so (no orchestrator answers, or one too busy)
// are published pipelined and stored. With group commit on (orchestrator.TopologyOptions.GroupCommit,
// as the Client found AX_TASKS when it was made) they are stored as atomic
// batches of up to 256 submissions, each stored with one fsync by a server
// that syncs every write; a batch the server refuses (one of its
// submissions was stored before, say) is published pipelined instead.
func (c *Client) SubmitMany(ctx context.Context, specs []task.Spec) ([]string, error) {
	ids := make([]string, len(specs))
	bodies := make([][]byte, len(specs))
	for i := range specs {
		if err := c.prepare(ctx, &specs[i]); err != nil {
			return nil, err
		}
		data, err := wirejson.Marshal(specs[i])
		if err != nil {
			return nil, fmt.Errorf("encode task %s: %w", specs[i].ID, err)
		}
		ids[i], bodies[i] = specs[i].ID, data
	}
	subj := func(i int) string { return subject.SubmitLane(specs[i].PriorityLevel(), specs[i].Type) }
	left := c.submitDirect(ctx, specs, subj, bodies)
	left = c.submitBatches(ctx, left, subj, ids, bodies)
	futures := make([]jetstream.PubAckFuture, len(left))
	for k, i := range left {
		f, err := c.js.PublishMsgAsync(submission(ctx, subj(i), bodies[i]), jetstream.WithMsgID(msgID(ids[i], bodies[i])))
		if err != nil {
			return nil, fmt.Errorf("submit task %s: %w", ids[i], err)
		}
		futures[k] = f
	}
	for k, f := range futures {
		i := left[k]
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				if err := c.resubmitIfRejected(ctx, subj(i), ids[i], bodies[i]); err != nil {
					return ids, err
				}
			}
		case err := <-f.Err():
			return nil, fmt.Errorf("submit task %s: %w", ids[i], err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return ids, nil
}

// submitBatches stores the submissions left (indexes into ids and
// bodies) as atomic batches and returns the indexes of those no batch
// stored, in order: all of them when group commit is off or they are too
// few to pay for a batch (groupcommit.PublishBatches). Their message ids are those the pipelined
// path gives them, so one whose batch's answer was lost is found duplicate
// there rather than stored twice.
func (c *Client) submitBatches(ctx context.Context, left []int, subj func(int) string, ids []string, bodies [][]byte) []int {
	if !c.store.GroupCommit() {
		return left
	}
	msgs := make([]*nats.Msg, len(left))
	for j, i := range left {
		msgs[j] = submission(ctx, subj(i), bodies[i])
		if msgs[j].Header == nil {
			msgs[j].Header = nats.Header{}
		}
		msgs[j].Header.Set(jetstream.MsgIDHeader, msgID(ids[i], bodies[i]))
	}
	var rest []int
	for j, ok := range groupcommit.PublishBatches(ctx, c.nc, msgs) {
		if !ok {
			rest = append(rest, left[j])
		}
	}
	return rest
}

// submitDirect hands the submissions to the orchestrators in batch direct
// requests, one type each (the subject names the type its publisher may
// submit), and returns the indexes of those not applied, in order. A
// submission carrying a trace context is sent on its own.
func (c *Client) submitDirect(ctx context.Context, specs []task.Spec, subj func(int) string, bodies [][]byte) []int {
	applied := make([]bool, len(specs))
	var g errgroup.Group
	g.SetLimit(directBatchesInFlight)
	byType := map[string][]int{}
	var order []string
	for i := range specs {
		if len(submission(ctx, subj(i), bodies[i]).Header) > 0 {
			g.Go(func() error {
				applied[i], _ = c.direct.Send(ctx, submission(ctx, subj(i), bodies[i]))
				return nil
			})
			continue
		}
		t := specs[i].Type
		if byType[t] == nil {
			order = append(order, t)
		}
		byType[t] = append(byType[t], i)
	}
	for _, t := range order {
		idx := byType[t]
		for start := 0; start < len(idx); start += direct.MaxBatch {
			chunk := idx[start:min(start+direct.MaxBatch, len(idx))]
			g.Go(func() error {
				b := make([][]byte, len(chunk))
				for k, i := range chunk {
					b[k] = bodies[i]
				}
				for k, ok := range c.direct.SendBatch(ctx, subject.Submit(t), nil, b) {
					applied[chunk[k]] = ok
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	var left []int
	for i, ok := range applied {
		if !ok {
			left = append(left, i)
		}
	}
	return left
}

// TaskIDs lists the ids of tasks whose id starts with prefix (an empty
// prefix lists all), from the task histories. It reads the stream's subject
// index, so it is meant for operators and tests, not hot paths.
func (c *Client) TaskIDs(ctx context.Context, prefix string) ([]string, error) {
	st, err := c.js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, fmt.Errorf("bind tasks: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject.TaskAll))
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	seen := map[string]bool{} // a task has a subject per kind of event
	var ids []string
	for subj := range info.State.Subjects {
		if id := subject.TaskID(subj); id != "" && !seen[id] && strings.HasPrefix(id, prefix) {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}
