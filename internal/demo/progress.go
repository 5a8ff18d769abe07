package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Tracker follows the live state of a set of tasks from the AX_TASKS stream.
type Tracker struct {
	mu      sync.Mutex
	tasks   map[string]task.Task
	changed chan struct{}
	cc      jetstream.ConsumeContext
}

// Track starts following the tasks with the given ids. Start it before
// submitting so no event is missed. Stop it with Close.
func Track(ctx context.Context, js jetstream.JetStream, ids []string) (*Tracker, error) {
	tr := &Tracker{tasks: make(map[string]task.Task, len(ids)), changed: make(chan struct{}, 1)}
	for _, id := range ids {
		tr.tasks[id] = task.Task{}
	}
	cons, err := js.OrderedConsumer(ctx, subject.StreamTasks, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.TaskAll},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("track tasks: %w", err)
	}
	tr.cc, err = cons.Consume(func(msg jetstream.Msg) {
		var ev task.Event
		if json.Unmarshal(msg.Data(), &ev) != nil {
			return
		}
		tr.mu.Lock()
		if _, ok := tr.tasks[ev.Task.ID]; ok {
			tr.tasks[ev.Task.ID] = ev.Task
		}
		tr.mu.Unlock()
		select {
		case tr.changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("track tasks: %w", err)
	}
	return tr, nil
}

// Close stops following.
func (tr *Tracker) Close() { tr.cc.Stop() }

// Changed is signalled after events arrive.
func (tr *Tracker) Changed() <-chan struct{} { return tr.changed }

// Counts returns how many tracked tasks are in each state ("submitted" for
// those not yet created).
func (tr *Tracker) Counts() map[task.State]int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := make(map[task.State]int)
	for _, t := range tr.tasks {
		s := t.State
		if s == "" {
			s = "submitted"
		}
		c[s]++
	}
	return c
}

// Task returns the last known record of a task.
func (tr *Tracker) Task(id string) task.Task {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.tasks[id]
}

// Done reports whether every tracked task except those in except is terminal.
func (tr *Tracker) Done(except ...string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for id, t := range tr.tasks {
		skip := false
		for _, e := range except {
			skip = skip || e == id
		}
		if !skip && !t.State.Terminal() {
			return false
		}
	}
	return true
}

// ProgressLine renders counts per state in life-cycle order.
func ProgressLine(elapsed time.Duration, counts map[task.State]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%5.1fs]", elapsed.Seconds())
	if n := counts["submitted"]; n > 0 {
		fmt.Fprintf(&b, " submitted %d |", n)
	}
	for i, s := range task.States() {
		if i > 0 {
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %s %d", s, counts[s])
	}
	return b.String()
}

// PrintSummary writes one line per task of the workload.
func PrintSummary(w io.Writer, tr *Tracker, specs []task.Spec) {
	fmt.Fprintf(w, "%-26s %-11s %-4s %-8s %-10s %-8s %s\n", "TASK", "TYPE", "PRIO", "CAP", "STATE", "ATTEMPTS", "REASON")
	for _, s := range specs {
		t := tr.Task(s.ID)
		fmt.Fprintf(w, "%-26s %-11s p%-3d %-8s %-10s %-8d %s\n", s.ID, s.Type, s.PriorityLevel(), s.Capability, t.State, t.Attempt, t.Reason)
	}
}
