// Package upgrade moves what an earlier version of AX stored into the form
// this version reads. Each step is idempotent: run again, it skips what it
// moved already.
package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/exectoken"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/task"
)

// TasksReport says what Tasks did.
type TasksReport struct {
	// Tasks is how many legacy histories were found; Moved how many were
	// given their state on the current layout (the others had it already).
	Tasks, Moved int
	// Dispatched counts the tasks moved as dispatches: ready ones (under
	// their execution id, so a report of it still applies) and running
	// ones (under a new execution: their executor, of the earlier version,
	// is stopped).
	Dispatched int
	// ReadyStreamRemoved says AX_READY (the earlier dispatches) was removed.
	ReadyStreamRemoved bool
}

// ErrBusy means a process of AX still consumes the streams Tasks changes.
var ErrBusy = errors.New("AX processes are still running")

// Options tune Tasks.
type Options struct {
	// Force runs even though consumers of the earlier version look active
	// (pull requests waiting on them).
	Force bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Progress, when set, is called every 1,000 tasks.
	Progress func(done, total int)
}

// Tasks moves the task histories of the earlier layout (one subject per
// task, ax.task.<id>) onto the current one (ax.task.<id>.e, and
// ax.task.<id>.d.… for dispatches): for each task, its last event's record
// is written as a "migrated" event on the current subjects (a
// compare-and-set on an empty history, so a task moved already is
// skipped), and its earlier events stay where they are (histories read
// both). A ready task not held back is written as its dispatch, under its
// execution id; a running task as a dispatch under a new execution (its
// executor of the earlier version is stopped); any other unfinished task
// gets the reconciler's look at once. Dispatches need the orchestrators'
// token key, so Tasks runs with the orchestrator's rights.
// Then AX_READY, the earlier versions' dispatches, is removed, and
// AX_TASKS records the current layout (topology.TaskLayoutKey), which
// orchestrators of this version wait for.
//
// Every AX process of the earlier version must be stopped first: Tasks
// refuses (ErrBusy) while consumers of AX_READY or the orchestrators'
// consumers have pull requests waiting, unless opts.Force.
func Tasks(ctx context.Context, js jetstream.JetStream, opts Options) (TasksReport, error) {
	var rep TasksReport
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if !opts.Force {
		if busy, err := activeConsumers(ctx, js); err != nil {
			return rep, err
		} else if len(busy) > 0 {
			return rep, fmt.Errorf("%w: consumers %s have pull requests waiting; stop every orchestrator and executor (or pass --force)", ErrBusy, strings.Join(busy, ", "))
		}
	}
	st, err := store.New(ctx, js)
	if err != nil {
		return rep, err
	}
	keys, err := exectoken.Load(ctx, js)
	if err != nil {
		return rep, fmt.Errorf("the orchestrators' token key (run with the orchestrator's rights): %w", err)
	}
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return rep, fmt.Errorf("bind %s: %w", subject.StreamTasks, err)
	}
	info, err := tasks.Info(ctx, jetstream.WithSubjectFilter(subject.LegacyTaskAll))
	if err != nil {
		return rep, fmt.Errorf("list legacy task histories: %w", err)
	}
	ids := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if id := subject.TaskID(subj); id != "" && subj == subject.LegacyTask(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	rep.Tasks = len(ids)
	consumers := map[string]bool{}
	for i, id := range ids {
		moved, dispatched, err := moveTask(ctx, js, tasks, st, keys, consumers, id, now().UTC())
		if err != nil {
			return rep, fmt.Errorf("task %s: %w", id, err)
		}
		if moved {
			rep.Moved++
		}
		if dispatched {
			rep.Dispatched++
		}
		if opts.Progress != nil && (i+1)%1000 == 0 {
			opts.Progress(i+1, len(ids))
		}
	}
	switch err := js.DeleteStream(ctx, subject.StreamReady); {
	case err == nil:
		rep.ReadyStreamRemoved = true
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return rep, fmt.Errorf("remove %s: %w", subject.StreamReady, err)
	}
	return rep, topology.SetTaskLayout(ctx, js)
}

// moveTask writes one legacy task's state onto the current layout.
func moveTask(ctx context.Context, js jetstream.JetStream, tasks jetstream.Stream, st *store.Store, keys *exectoken.Key, consumers map[string]bool, id string, now time.Time) (moved, dispatched bool, err error) {
	if _, _, err := st.Get(ctx, id); err == nil {
		return false, false, nil // moved already
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, false, err
	}
	last, err := tasks.GetLastMsgForSubject(ctx, subject.LegacyTask(id))
	if err != nil {
		return false, false, fmt.Errorf("read its legacy history: %w", err)
	}
	var ev task.Event
	if err := decodeEvent(last.Data, &ev); err != nil {
		return false, false, fmt.Errorf("decode its legacy history at %d: %w", last.Sequence, err)
	}
	t := ev.Task
	t.UpdatedAt = now
	t.DispatchRevision = 0
	reason := fmt.Sprintf("moved onto the current history layout from revision %d (%s)", last.Sequence, t.Reason)
	dispatch := false
	switch {
	case t.State == task.Running:
		// Its executor (of the earlier version) is stopped: run it again,
		// under a new execution, as a take-over would.
		t.State, t.ExecutionID, t.Executor, t.StartedAt = task.Ready, nuid.Next(), "", nil
		t.ReadyAt = &now
		t.Takeovers++
		reason = fmt.Sprintf("moved onto the current history layout from revision %d: it was running on an executor of an earlier version, now stopped; dispatched again", last.Sequence)
		dispatch = true
	case t.State == task.Ready && !strings.HasPrefix(t.Reason, "held:"):
		dispatch = true
	}
	t.Reason = reason
	out := task.Event{Kind: task.KindMigrated, From: ev.Task.State, To: t.State, At: now, Actor: "ax migrate tasks", Reason: reason, Task: t}
	if dispatch {
		if !consumers[t.Capability] {
			if err := topology.EnsureReadyConsumers(ctx, js, t.Capability); err != nil {
				return false, false, err
			}
			consumers[t.Capability] = true
		}
		_, err = st.Dispatch(ctx, out, 0, keys.Sign(t.ID, t.ExecutionID), t.TraceParent)
	} else {
		_, err = st.Write(ctx, out, 0)
	}
	if errors.Is(err, store.ErrConflict) {
		return false, false, nil // moved meanwhile
	}
	if err != nil {
		return false, false, err
	}
	if !dispatch && !t.State.Terminal() {
		// Its look at once (an immediate watch: subjects.md, timers), so a
		// waiting, held or retrying task moves on from its new record
		// whatever timers it had.
		look, _ := json.Marshal(map[string]any{"id": t.ID, "kind": string(subject.TimerWatch), "at": now})
		if _, err := js.Publish(ctx, subject.Fire(subject.TimerWatch, t.ID), look); err != nil {
			return true, false, fmt.Errorf("arm its look: %w", err)
		}
	}
	return true, dispatch, nil
}

func decodeEvent(data []byte, ev *task.Event) error { return json.Unmarshal(data, ev) }

// activeConsumers lists the consumers of the earlier version's processes
// that have pull requests waiting: AX_READY's (executors) and the
// orchestrators' intake, report, timer and command consumers.
func activeConsumers(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var busy []string
	for _, name := range []string{subject.StreamReady, subject.StreamSubmit, subject.StreamCompleted, subject.StreamTimers, subject.StreamCommands} {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("bind %s: %w", name, err)
		}
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.NumWaiting > 0 {
				busy = append(busy, name+"/"+ci.Name)
			}
		}
		if err := lister.Err(); err != nil {
			return nil, fmt.Errorf("list the consumers of %s: %w", name, err)
		}
	}
	return busy, nil
}
