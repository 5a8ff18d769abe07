package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ax-run/ax/internal/typeset"
	"github.com/ax-run/ax/task"
)

// Limits protect the cluster from one submitter. A submission over a limit
// is rejected like any invalid one (kept on AX_REJECTED with a reason
// naming the limit and its value); a planner over MaxShards fails its task.
// The payload limit is Config.MaxPayload.
//
// The zero value of a field means its default. The defaults of
// MaxGraphTasks, MaxDependencies and MaxShards are also their ceilings: a
// configured value may lower them, never raise them (New refuses a higher
// one), because other parts check the same constants (see each field).
type Limits struct {
	// MaxGraphTasks bounds the tasks of one graph (task.graph.submit).
	// Default and ceiling task.MaxGraphTasks (10,000): the SDK checks the
	// same ceiling before sending, and an orchestrator creates a whole
	// graph while it holds the message, within its AckWait.
	MaxGraphTasks int
	// MaxDependencies bounds the depends_on entries of one task. Default
	// and ceiling task.MaxDependencies (1,000): every spec is validated
	// against it (by the SDK too), and a task's record, rewritten at each
	// of its changes, carries its depends_on.
	MaxDependencies int
	// MaxShards bounds the shards one planner may return: a plan with
	// more fails its task ("the planner returned N shards; the limit is
	// M"). Default and ceiling task.MaxShards (100,000): executors refuse
	// larger plans themselves, and an orchestrator registers a plan's
	// shards while it holds one message.
	MaxShards int
	// MaxTaskTypes bounds the distinct task types the cluster accepts new
	// tasks for (submissions, graphs, schedules). The accepted types are
	// recorded in the AX_TYPES stream in the order they were first
	// accepted, so the limit holds across restarts and between several
	// orchestrators; the first MaxTaskTypes recorded are accepted, so a
	// lowered limit keeps the oldest. Each orchestrator keeps them in
	// memory (at most MaxTaskTypes), so a task of a known type costs no
	// extra request. Give every orchestrator the same value. Default 0:
	// unlimited, and nothing is recorded.
	MaxTaskTypes int
	// MaxEventWaitersPerSubject bounds the tasks waiting for events of one
	// subject (<subject>.<match>: wait_for and cancel_on markers): a task
	// whose registration would exceed it fails ("more than N tasks wait
	// for events on …"). An event's delivery is bounded per message
	// whatever this is; the bound keeps the whole work of one event
	// within reach. Counted with a counter per subject in AX_COUNTS,
	// checked against the markers when it passes the bound (so a count
	// left high by a crash does not refuse anybody). Default
	// DefaultMaxEventWaitersPerSubject (10,000); negative: unbounded.
	// Give every orchestrator the same value.
	MaxEventWaitersPerSubject int
}

// DefaultMaxEventWaitersPerSubject is Limits.MaxEventWaitersPerSubject's
// default.
const DefaultMaxEventWaitersPerSubject = 10_000

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	if l.MaxGraphTasks == 0 {
		l.MaxGraphTasks = task.MaxGraphTasks
	}
	if l.MaxDependencies == 0 {
		l.MaxDependencies = task.MaxDependencies
	}
	if l.MaxShards == 0 {
		l.MaxShards = task.MaxShards
	}
	if l.MaxEventWaitersPerSubject == 0 {
		l.MaxEventWaitersPerSubject = DefaultMaxEventWaitersPerSubject
	}
	return l
}

// validate refuses negative limits and limits above their ceilings.
func (l Limits) validate() error {
	for _, f := range []struct {
		name       string
		v, ceiling int
	}{
		{"MaxGraphTasks", l.MaxGraphTasks, task.MaxGraphTasks},
		{"MaxDependencies", l.MaxDependencies, task.MaxDependencies},
		{"MaxShards", l.MaxShards, task.MaxShards},
	} {
		switch {
		case f.v < 0:
			return fmt.Errorf("limit %s is %d: it must be positive (0: the default %d)", f.name, f.v, f.ceiling)
		case f.v > f.ceiling:
			return fmt.Errorf("limit %s is %d: it may lower the default %d, not raise it", f.name, f.v, f.ceiling)
		}
	}
	if l.MaxTaskTypes < 0 {
		return fmt.Errorf("limit MaxTaskTypes is %d: it must be positive (0: unlimited)", l.MaxTaskTypes)
	}
	return nil
}

// checkSpec applies the configured limits to a spec, saying which flag
// sets them (task.Spec.Validate checks the payload too, and the
// dependencies only at their ceiling).
func (o *Orchestrator) checkSpec(s task.Spec) error {
	if n, limit := len(s.Payload), o.cfg.MaxPayload; n > limit {
		return &task.ValidationError{Field: "payload",
			Reason: fmt.Sprintf("%d bytes exceeds the limit of %d (ax orchestrator --max-payload)", n, limit)}
	}
	if n, limit := len(s.DependsOn), o.cfg.Limits.MaxDependencies; n > limit {
		return &task.ValidationError{Field: "depends_on",
			Reason: fmt.Sprintf("%d dependencies exceed the limit of %d (ax orchestrator --max-dependencies)", n, limit)}
	}
	return nil
}

// checkGraph applies the configured limits to a graph before it is sorted.
func (o *Orchestrator) checkGraph(g task.Graph) error {
	if n, limit := len(g.Tasks), o.cfg.Limits.MaxGraphTasks; n > limit {
		return &task.ValidationError{Field: "tasks",
			Reason: fmt.Sprintf("%d tasks exceed the limit of %d (ax orchestrator --max-graph-tasks)", n, limit)}
	}
	for _, s := range g.Tasks {
		if err := o.checkSpec(s); err != nil {
			return fmt.Errorf("task %q: %w", s.ID, err)
		}
	}
	return nil
}

// admitTypes accepts the task types of new tasks under MaxTaskTypes: an
// errRejected naming the limit when one is a type too many, another error
// when the record could not be read or written (the message is retried).
// Types already accepted cost nothing. Several new types that would not
// all fit, as far as this orchestrator knows, are refused before any is
// recorded (one that loses a race with another orchestrator midway may
// leave the types before it recorded).
func (o *Orchestrator) admitTypes(ctx context.Context, types ...string) error {
	if o.types == nil {
		return nil
	}
	fresh, fit := o.types.Unknown(types)
	if len(fresh) == 0 {
		return nil
	}
	if !fit {
		return o.typeRejection(fresh)
	}
	for _, typ := range fresh {
		err := o.types.Admit(ctx, typ)
		if errors.Is(err, typeset.ErrLimit) {
			return o.typeRejection([]string{typ})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// admitGraphTypes admits the task types of a graph's specs (see admitTypes).
func (o *Orchestrator) admitGraphTypes(ctx context.Context, specs []task.Spec) error {
	if o.types == nil {
		return nil
	}
	types := make([]string, len(specs))
	for i, s := range specs {
		types[i] = s.Type
	}
	return o.admitTypes(ctx, types...)
}

// typeRejection rejects new types over MaxTaskTypes.
func (o *Orchestrator) typeRejection(fresh []string) error {
	quoted := make([]string, len(fresh))
	for i, t := range fresh {
		quoted[i] = strconv.Quote(t)
	}
	what := "new task type " + quoted[0]
	if len(quoted) > 1 {
		what = "new task types " + strings.Join(quoted, ", ")
	}
	return errRejected{reason: &task.ValidationError{Field: "type",
		Reason: fmt.Sprintf("%s: this cluster accepts tasks of at most %d types, the limit of ax orchestrator --max-task-types (the accepted ones are recorded in AX_TYPES)", what, o.types.Limit())}}
}
