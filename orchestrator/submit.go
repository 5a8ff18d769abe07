package orchestrator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/oklog/ulid/v2"

	"github.com/ax-run/ax/internal/lifecycle"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// rejectInputLimit bounds how much of a rejected input is kept.
const rejectInputLimit = 4096

// errRejected wraps the reason a submission is refused.
type errRejected struct {
	reason error
}

func (e errRejected) Error() string { return e.reason.Error() }

func reject(format string, args ...any) error {
	return errRejected{reason: fmt.Errorf(format, args...)}
}

// handleSubmit creates a task from task.submit.<type>, or a graph of them
// from task.graph.submit.
func (o *Orchestrator) handleSubmit(ctx context.Context, msg jetstream.Msg) error {
	if msg.Subject() == subject.GraphSubmit {
		return o.handleGraph(ctx, msg)
	}
	spec, err := o.decodeSubmission(msg)
	if err == nil {
		err = o.admitTypes(ctx, spec.Type)
	}
	if err == nil {
		err = o.create(ctx, spec, nil)
	}
	var rej errRejected
	if errors.As(err, &rej) {
		return o.reject(ctx, spec.ID, msg, rej.reason)
	}
	return err
}

// decodeSubmission parses and validates a single submission.
func (o *Orchestrator) decodeSubmission(msg jetstream.Msg) (task.Spec, error) {
	typ, _ := subject.TypeFromSubmit(msg.Subject())
	spec, err := task.DecodeSpec(msg.Data())
	if err != nil {
		// Keep the id when the rest is bad, so the rejection can be looked up.
		var probe struct {
			ID string `json:"id"`
		}
		_ = json.NewDecoder(bytes.NewReader(msg.Data())).Decode(&probe) // the first value only
		spec.ID = probe.ID
		return spec, errRejected{reason: err}
	}
	switch {
	case spec.Type == "":
		spec.Type = typ
	case spec.Type != typ:
		return spec, reject("type %q does not match the subject's type %q", spec.Type, typ)
	}
	if spec.ID == "" {
		if spec.ID, err = derivedID(msg); err != nil {
			return spec, err
		}
	}
	if err := o.checkSpec(spec); err != nil {
		return spec, errRejected{reason: err}
	}
	if err := spec.Validate(o.cfg.MaxPayload); err != nil {
		return spec, errRejected{reason: err}
	}
	return spec, nil
}

// errNeedsID: a submission without an id that was not stored (a direct
// request) has no stream sequence to derive one from; its sender stores it.
var errNeedsID = errors.New("a direct submission needs an id (stored, it gets one that is the same on every redelivery)")

// derivedID gives a submission without an id a sortable id that is the same
// on every redelivery of that message (its stream sequence is the entropy).
func derivedID(msg jetstream.Msg) (string, error) {
	md, err := msg.Metadata()
	if err != nil {
		return "", errNeedsID
	}
	var entropy [10]byte
	seq := md.Sequence.Stream
	for i := 9; i >= 2; i-- {
		entropy[i] = byte(seq)
		seq >>= 8
	}
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(md.Timestamp))
	_ = id.SetEntropy(entropy[:])
	return id.String(), nil
}

// handleGraph creates every task of a graph in dependency order. The graph
// is validated as a whole first (a cycle or an invalid spec rejects it all);
// creation is idempotent, so a redelivered graph completes the set.
// Dependencies outside the graph that do not exist yet are waited for, as
// for a single submission (see resolveWaiting).
func (o *Orchestrator) handleGraph(ctx context.Context, msg jetstream.Msg) error {
	g, err := task.DecodeGraph(msg.Data())
	if err != nil {
		return o.rejectGraph(ctx, graphIDs(msg.Data()), msg, err)
	}
	if err := o.checkGraph(g); err != nil {
		return o.rejectGraph(ctx, g, msg, err)
	}
	sorted, err := g.Sorted(o.cfg.MaxPayload)
	if err != nil {
		return o.rejectGraph(ctx, g, msg, err)
	}
	if err := o.admitGraphTypes(ctx, sorted); err != nil {
		var rej errRejected
		if errors.As(err, &rej) {
			return o.rejectGraph(ctx, g, msg, rej.reason)
		}
		return err
	}
	inGraph := make(map[string]bool, len(sorted))
	for _, s := range sorted {
		inGraph[s.ID] = true
	}
	// In-graph edges are written into each upstream's record when it is
	// created, instead of one compare-and-set per edge afterwards.
	children := make(map[string][]string)
	for _, s := range sorted {
		for _, dep := range s.DependsOn {
			if inGraph[dep] {
				children[dep] = append(children[dep], s.ID)
			}
		}
	}
	rejected, err := createGraph(ctx, graphLevels(sorted, inGraph), func(ctx context.Context, s task.Spec) error {
		return o.create(ctx, s, children[s.ID])
	})
	if rejected != nil {
		return o.rejectGraph(ctx, g, msg, rejected)
	}
	return err
}

// createGraph creates a graph's tasks level by level, each level's tasks
// at once (graphWorkers at a time): a task's in-graph upstreams are all in
// earlier levels, and its record is written after theirs, which name it as
// a dependent. A task that fails does not stop the others: under faults a
// graph of many tasks created one by one could fail delivery after
// delivery on its first tasks, while those created in an earlier delivery
// with their effects not yet ensured waited for the delivery that reached
// them (a chaos run saw a fan-in's upstream wait 3 minutes so, and the
// logs of another most likely one 1 min 29 s). Now every task of a level
// is tried in every delivery. Only a failed task's in-graph dependents
// wait for the next delivery, and after graphFailures failures no new
// creation starts (JetStream is out of reach: the rest waits for the
// redelivery, rather than each waiting out its timeout). It returns the
// reason a task was rejected, which rejects the graph, or else the first
// error, which has the message redelivered.
func createGraph(ctx context.Context, levels [][]task.Spec, create func(context.Context, task.Spec) error) (rejected, first error) {
	var (
		mu       sync.Mutex
		failures int
		// failedNow: the level's tasks that failed, added to failed
		// (which also holds the dependents skipped for them) after it.
		failedNow []string
	)
	failed := make(map[string]bool)
	stopped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failures >= graphFailures || rejected != nil || ctx.Err() != nil
	}
	for _, level := range levels {
		var try []task.Spec
		for _, s := range level {
			if slices.ContainsFunc(s.DependsOn, func(dep string) bool { return failed[dep] }) {
				failed[s.ID] = true
				continue
			}
			try = append(try, s)
		}
		inTurn(len(try), graphWorkers, func(i int) {
			s := try[i]
			if stopped() {
				return // left for the redelivery
			}
			err := create(ctx, s)
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if rej := (errRejected{}); errors.As(err, &rej) {
				if rejected == nil {
					rejected = fmt.Errorf("task %q: %w", s.ID, rej.reason)
				}
				return
			}
			if first == nil {
				first = err
			}
			failures++
			failedNow = append(failedNow, s.ID)
		})
		if rejected != nil {
			return rejected, nil
		}
		if stopped() {
			return nil, cmp.Or(first, ctx.Err())
		}
		for _, id := range failedNow {
			failed[id] = true
		}
		failedNow = failedNow[:0]
	}
	return nil, first
}

// graphFailures is how many of a graph's tasks may fail in one delivery
// before the rest wait for the next; graphWorkers, how many of a level's
// tasks are created at once.
const (
	graphFailures = 4
	graphWorkers  = 16
)

// graphLevels splits a graph's tasks, sorted so that each follows its
// in-graph upstreams, into levels: a task's level is one more than its
// in-graph upstreams' highest, 0 without any. Each level keeps the sorted
// order.
func graphLevels(sorted []task.Spec, inGraph map[string]bool) [][]task.Spec {
	level := make(map[string]int, len(sorted))
	var levels [][]task.Spec
	for _, s := range sorted {
		l := 0
		for _, dep := range s.DependsOn {
			if inGraph[dep] {
				l = max(l, level[dep]+1)
			}
		}
		level[s.ID] = l
		if l == len(levels) {
			levels = append(levels, nil)
		}
		levels[l] = append(levels[l], s)
	}
	return levels
}

func (o *Orchestrator) rejectGraph(ctx context.Context, g task.Graph, msg jetstream.Msg, reason error) error {
	if len(g.Tasks) == 0 {
		return o.reject(ctx, "", msg, reason)
	}
	for _, s := range g.Tasks {
		if task.ValidID(s.ID) {
			if err := o.reject(ctx, s.ID, msg, fmt.Errorf("graph rejected: %w", reason)); err != nil {
				return err
			}
		}
	}
	return nil
}

// create makes a new task unless one with its id exists (idempotent submit),
// then ensures the effects of whatever state the task is in. dependents are
// the members of its graph that depend on it (created after it). An upstream that
// does not exist yet is waited for up to the dependency timeout: its
// submission may still be in flight (see resolveWaiting).
func (o *Orchestrator) create(ctx context.Context, spec task.Spec, dependents []string) error {
	now := o.now()
	t := task.Task{Spec: spec, SubmittedAt: now, Dependents: dependents}
	t.TraceParent = traceCreated(ctx, t)
	switch {
	case spec.RunAt != nil:
		at := spec.RunAt.UTC()
		t.StartAt = &at
	case spec.Delay > 0:
		at := now.Add(spec.Delay.Std())
		t.StartAt = &at
	}
	switch {
	case spec.Deadline != nil:
		at := spec.Deadline.UTC()
		t.ExpiresAt = &at
	case spec.TTL > 0:
		at := now.Add(spec.TTL.Std())
		t.ExpiresAt = &at
	}
	var holder string
	var heldUntil time.Time
	if spec.UniqueKey != "" {
		var exists bool
		var err error
		if holder, heldUntil, exists, err = o.claimUnique(ctx, spec, now); err != nil {
			return err
		}
		if exists {
			existing, rev, err := o.store.Get(ctx, spec.ID)
			if err != nil {
				return err
			}
			return o.duplicate(ctx, spec, existing, rev)
		}
	}
	if spec.CancelOn != nil {
		// Only an event stored after this read cancels the task.
		var err error
		if t.CancelOnAfter, err = o.eventAcceptance(ctx); err != nil {
			return err
		}
	}
	var dupReason string
	if holder != "" {
		dupReason = duplicateReason(spec, holder, heldUntil)
	}
	env := o.env()
	env.Now = now
	d := lifecycle.Create(&t, holder, dupReason, func() bool { return o.gateOpen(now, spec.Type) }, env)
	t = d.Next
	rev, err := o.write(ctx, task.Task{}, 0, &t, d.Reason)
	if errors.Is(err, store.ErrConflict) {
		existing, rev, err := o.store.Get(ctx, spec.ID)
		if err != nil {
			return err
		}
		return o.duplicate(ctx, spec, existing, rev)
	}
	if err != nil {
		return err
	}
	o.log.Debug("task created", slog.String("task_id", t.ID), slog.String("state", string(t.State)))
	if err := o.armDeadline(ctx, t); err != nil {
		return err
	}
	return o.ensureEffects(ctx, t, rev)
}

// duplicate handles a submission whose id already exists: the first one
// wins; the effects of its state are ensured in case this is a redelivery
// after a crash.
func (o *Orchestrator) duplicate(ctx context.Context, spec task.Spec, existing task.Task, rev uint64) error {
	if !reflect.DeepEqual(normalized(spec), normalized(existing.Spec)) {
		o.log.Warn("duplicate submission with a different spec ignored; the first one stands", slog.String("task_id", spec.ID))
	}
	// A redelivered submission may have crashed before arming the deadline.
	if err := o.armDeadline(ctx, existing); err != nil {
		return err
	}
	return o.ensureEffects(ctx, existing, rev)
}

func normalized(s task.Spec) task.Spec {
	if len(s.Payload) > 0 {
		var v any
		if json.Unmarshal(s.Payload, &v) == nil {
			s.Payload, _ = json.Marshal(v)
		}
	}
	if len(s.DependsOn) == 0 {
		s.DependsOn = nil
	}
	return s
}

// reject records why a submission was refused on ax.rejected.<id> and logs
// it. It never fails the message for a bad input: only a NATS error does.
func (o *Orchestrator) reject(ctx context.Context, id string, msg jetstream.Msg, reason error) error {
	if id != "" && !task.ValidID(id) {
		id = ""
	}
	input := msg.Data()
	if len(input) > rejectInputLimit {
		input = input[:rejectInputLimit]
	}
	in := string(input)
	if !utf8.ValidString(in) {
		in = fmt.Sprintf("%q", input)
	}
	r := task.Rejection{ID: id, Subject: msg.Subject(), Reason: reason.Error(), Input: in, RejectedAt: o.now()}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode rejection: %w", err)
	}
	o.log.Warn("submission rejected", slog.String("task_id", id), slog.String("subject", msg.Subject()), slog.String("reason", r.Reason))
	o.metrics.SubmissionRejected()
	if _, err := o.js.Publish(ctx, subject.Rejected(id, nuid.Next()), data); err != nil {
		return fmt.Errorf("record rejection: %w", err)
	}
	return nil
}
