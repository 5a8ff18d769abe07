// Package store reads and writes task histories in the AX_TASKS stream.
//
// A task's history is every message under ax.task.<id>. (its events on
// ax.task.<id>.e, its dispatches on ax.task.<id>.d.<capability>.p<N>.<type>:
// see internal/subject). Every message is a task.Event holding what
// happened and the full record after it, so a state change and its audit
// entry are one atomic write, and a dispatch is its ready record itself:
// executors consume it. The stream sequence of the last message is the
// task's revision; every write is a compare-and-set against it
// (Nats-Expected-Last-Subject-Sequence, checked on ax.task.<id>.> through
// Nats-Expected-Last-Subject-Sequence-Subject), so two writers, or a
// replayed message, can never apply the same transition twice.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/jspub"
	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// Errors returned by Store.
var (
	// ErrNotFound means no task has that id.
	ErrNotFound = errors.New("task not found")
	// ErrConflict means the task changed since the revision the write expected.
	ErrConflict = errors.New("task changed concurrently")
)

// Store reads and compare-and-set writes task histories.
type Store struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	reads   atomic.Uint64
	writes  atomic.Uint64
	publish func(context.Context, *nats.Msg) (*jetstream.PubAck, error)
}

// GroupCommit reports whether AX_TASKS, as the Store found it, turns group
// commit on (groupcommit.Enabled).
func (s *Store) GroupCommit() bool { return groupcommit.Enabled(s.stream.CachedInfo().Config) }

// UseCommitter makes the Store's writes go through c, which batches the
// writes that queue up (package groupcommit). Call it before the first
// write; the caller owns c and closes it after the Store's last write.
func (s *Store) UseCommitter(c *groupcommit.Committer) { s.publish = c.Publish }

// Reads returns how many task records this Store has read: benchmarks and
// tests use it to show how much reading a workload costs.
func (s *Store) Reads() uint64 { return s.reads.Load() }

// Writes returns how many events this Store has written (compare-and-sets
// that succeeded): tests use it to bound the work one message causes.
func (s *Store) Writes() uint64 { return s.writes.Load() }

// New binds a Store to the AX_TASKS stream, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Store, error) {
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", subject.StreamTasks, err)
	}
	s := &Store{js: js, stream: leaderget.Wrap(st, leaderget.New(js))}
	s.publish = func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
		return jspub.PublishMsg(ctx, js.Conn(), m)
	}
	return s, nil
}

// Get returns a task's current record and revision.
func (s *Store) Get(ctx context.Context, id string) (task.Task, uint64, error) {
	ev, rev, err := s.Last(ctx, id)
	if err != nil {
		return task.Task{}, 0, err
	}
	return ev.Task, rev, nil
}

// Last returns a task's last event and revision. When the last event is a
// dispatch, its record's DispatchRevision is that revision.
func (s *Store) Last(ctx context.Context, id string) (task.Event, uint64, error) {
	var ev task.Event
	rev, dispatch, err := s.decodeLast(ctx, id, &ev)
	if dispatch {
		ev.Task.DispatchRevision = rev
	}
	return ev, rev, err
}

// decodeLast reads a task's last event into v and returns its revision and
// whether it is a dispatch; ErrNotFound when the task has no history. Reads
// are direct gets while AX_TASKS has one replica, leader reads otherwise
// (internal/topology), through internal/leaderget (past a replica's
// "unavailable" while the leader answers); when the stream stopped allowing direct gets since
// this store bound it (it was given replicas), nobody answers them: the
// store refreshes what it knows of the stream and reads again.
func (s *Store) decodeLast(ctx context.Context, id string, v any) (uint64, bool, error) {
	s.reads.Add(1)
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject.TaskHistory(id))
	if errors.Is(err, nats.ErrNoResponders) && s.stream.CachedInfo().Config.AllowDirect {
		if _, ierr := s.stream.Info(ctx); ierr == nil {
			msg, err = s.stream.GetLastMsgForSubject(ctx, subject.TaskHistory(id))
		}
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, ErrNotFound
	}
	if err != nil {
		return 0, false, fmt.Errorf("get task %s: %w", id, err)
	}
	if err := wirejson.Unmarshal(msg.Data, v); err != nil {
		return 0, false, fmt.Errorf("decode task %s at revision %d: %w", id, msg.Sequence, err)
	}
	return msg.Sequence, subject.IsDispatch(msg.Subject), nil
}

// Write appends ev to its task's history if the task is still at revision
// expected (0: the task must not exist yet). It returns the new revision, or
// ErrConflict when the task moved on. The transition must be in the table.
func (s *Store) Write(ctx context.Context, ev task.Event, expected uint64) (uint64, error) {
	return s.write(ctx, subject.TaskEvents(ev.Task.ID), ev, expected, nil)
}

// Dispatch writes ev, whose record is ready under a new execution, as the
// task's dispatch (subject.TaskDispatch): the one message that records the
// transition and hands the task to an executor of its capability, carrying
// the execution's token in the HeaderToken header (not in the record: only
// the executor it is delivered to learns it). Otherwise as Write.
// traceParent, when set, goes with it as the traceparent header (the
// dispatch's span: the executor's attempt continues it).
func (s *Store) Dispatch(ctx context.Context, ev task.Event, expected uint64, token, traceParent string) (uint64, error) {
	t := ev.Task
	if t.State != task.Ready || t.ExecutionID == "" {
		return 0, fmt.Errorf("dispatch task %s: a dispatch needs a ready record with an execution id (it is %s)", t.ID, t.State)
	}
	h := nats.Header{}
	if token != "" {
		h.Set(subject.HeaderToken, token)
	}
	if traceParent != "" {
		h.Set(subject.HeaderTraceParent, traceParent)
	}
	return s.write(ctx, subject.TaskDispatch(t.ID, t.Capability, t.PriorityLevel(), t.Type), ev, expected, h)
}

func (s *Store) write(ctx context.Context, subj string, ev task.Event, expected uint64, h nats.Header) (uint64, error) {
	if ev.Kind == task.KindTransition && !task.CanTransition(ev.From, ev.To) {
		return 0, &task.ErrInvalidTransition{From: ev.From, To: ev.To}
	}
	if expected == 0 && ev.Kind != task.KindMigrated && (ev.From != "" || ev.Kind != task.KindTransition) {
		// Revision 0 means "create": only a creation (or a migration) may expect it.
		return 0, fmt.Errorf("write task %s: a change from %q needs the task's revision", ev.Task.ID, ev.From)
	}
	// The revision of a dispatch is that of its own message: not stored in
	// it (a reader of the message knows it), nor copied from a record read.
	if subject.IsDispatch(subj) {
		ev.Task.DispatchRevision = 0
	}
	data, err := wirejson.Marshal(ev)
	if err != nil {
		return 0, fmt.Errorf("encode event for task %s: %w", ev.Task.ID, err)
	}
	if h == nil {
		h = nats.Header{}
	}
	msg := &nats.Msg{Subject: subj, Data: data, Header: h}
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
	msg.Header.Set(headerExpectedLastSubjSeqSubj, subject.TaskHistory(ev.Task.ID))
	ack, err := s.publish(ctx, msg)
	if err != nil {
		if IsConflict(err) {
			return 0, ErrConflict
		}
		return 0, fmt.Errorf("write task %s %s->%s: %w", ev.Task.ID, ev.From, ev.To, err)
	}
	s.writes.Add(1)
	return ack.Sequence, nil
}

// headerExpectedLastSubjSeqSubj makes the server check
// Nats-Expected-Last-Subject-Sequence against the last message on the
// subjects it names (a wildcard: every subject of one task's history)
// rather than on the message's own subject.
const headerExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"

// IsConflict reports whether err is a failed compare-and-set.
func IsConflict(err error) bool {
	if errors.Is(err, ErrConflict) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// Revisioned is an event with its revision (stream sequence); the public
// name is task.HistoryEntry.
type Revisioned = task.HistoryEntry

// History returns every event of a task in order (those a task created by
// an earlier version wrote on its legacy subject first).
func (s *Store) History(ctx context.Context, id string) ([]Revisioned, error) {
	_, last, err := s.Last(ctx, id)
	if errors.Is(err, ErrNotFound) {
		last, err = s.lastLegacy(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	cons, done, err := scan.Open(ctx, s.js, subject.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.LegacyTask(id), subject.TaskHistory(id)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("read history of %s: %w", id, err)
	}
	defer done()
	var out []Revisioned
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return out, fmt.Errorf("read history of %s: %w", id, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return out, fmt.Errorf("read history of %s: %w", id, err)
		}
		var ev task.Event
		if err := wirejson.Unmarshal(msg.Data(), &ev); err != nil {
			return out, fmt.Errorf("decode history of %s at %d: %w", id, md.Sequence.Stream, err)
		}
		if subject.IsDispatch(msg.Subject()) {
			ev.Task.DispatchRevision = md.Sequence.Stream
		}
		out = append(out, Revisioned{Revision: md.Sequence.Stream, Event: ev})
		if md.Sequence.Stream >= last {
			return out, nil
		}
	}
}

// lastLegacy returns the revision of the last event on a task's legacy
// history subject (subject.LegacyTask), or ErrNotFound.
func (s *Store) lastLegacy(ctx context.Context, id string) (uint64, error) {
	msg, err := s.stream.GetLastMsgForSubject(ctx, subject.LegacyTask(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("get task %s: %w", id, err)
	}
	return msg.Sequence, nil
}

// HasLegacy reports whether AX_TASKS holds any history in the layout of
// earlier versions (one subject per task, subject.LegacyTask), which `ax
// migrate tasks` moves onto the current subjects.
func (s *Store) HasLegacy(ctx context.Context) (bool, error) {
	_, err := s.stream.GetLastMsgForSubject(ctx, subject.LegacyTaskAll)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look for legacy task histories: %w", err)
	}
	return true, nil
}
