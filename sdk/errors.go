package sdk

import (
	"errors"
	"strings"

	"github.com/ax-run/ax/task"
)

// ErrScheduleNotFound means no schedule has that name.
var ErrScheduleNotFound = errors.New("schedule not found")

// ErrConflict means the orchestrator refused a command because what it
// names is in no state for it: cancelling a task that ended, re-driving
// one that did not fail.
var ErrConflict = errors.New("command refused: conflicting state")

// ErrInvalid means a request is malformed: a spec or graph that does not
// validate (Submit, SubmitGraph, SubmitMany), an invalid id or type, or a
// command the orchestrator refused as malformed (a bad schedule, limit or
// pause scope).
var ErrInvalid = errors.New("invalid")

// CommandError is an orchestrator's refusal of a command (cancel,
// re-drive, pause, schedules, limits). errors.Is matches it with
// ErrNotFound (a task that does not exist), ErrScheduleNotFound,
// ErrConflict or ErrInvalid, by its Code.
type CommandError struct {
	// Kind is the command ("cancel", "redrive", "schedule-pause", …) and
	// ID what it names (a task id, a schedule name, a pause scope).
	Kind, ID string
	// Code is the reply's code: task.ReplyNotFound, ReplyConflict or
	// ReplyInvalid ("" from an orchestrator older than codes).
	Code string
	// Reason is the orchestrator's explanation.
	Reason string
}

// Error is "<kind> <id>: <reason>".
func (e *CommandError) Error() string { return e.Kind + " " + e.ID + ": " + e.Reason }

// Is matches the sentinel of the refusal's code.
func (e *CommandError) Is(target error) bool {
	switch e.Code {
	case task.ReplyNotFound:
		if strings.HasPrefix(e.Kind, "schedule-") {
			return target == ErrScheduleNotFound
		}
		return target == ErrNotFound
	case task.ReplyConflict:
		return target == ErrConflict
	case task.ReplyInvalid:
		return target == ErrInvalid
	}
	return false
}

// refused is the error of a command reply that was not applied.
func refused(kind, id string, rep *task.CommandReply) error {
	return &CommandError{Kind: kind, ID: id, Code: rep.Code, Reason: rep.Error}
}
