package task

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Durable steps and sleeps (executor.Job.Step, executor.Job.Sleep). A step
// is a piece of a handler whose result the orchestrator stores in the
// task's record (Task.Steps) before the step returns, so that a later
// attempt of the task (a retry, a take-over, a re-drive, the resumption
// after a sleep) returns the stored result instead of running it again.
// The executor asks the orchestrator to store it with a report of status
// OutcomeStep; a sleep is the report OutcomeSleeping that ends the attempt.

// Limits of durable steps.
const (
	// MaxSteps bounds the steps and sleeps stored for one task.
	MaxSteps = 100
	// MaxStepNameBytes bounds a step's name.
	MaxStepNameBytes = 128
	// StepInlineLimit is the largest step result kept inside the task's
	// record; a larger one is stored in the object store of the task's
	// capability under StepObjectName.
	StepInlineLimit = 4 << 10
	// StepsInlineTotal bounds the inline step results of one record
	// together: a result that would take them over is stored as an object.
	StepsInlineTotal = 64 << 10
	// MaxStepResult bounds one step's result, inline or stored.
	MaxStepResult = 32 << 20
	// MaxSleep bounds one durable sleep.
	MaxSleep = 366 * 24 * time.Hour
	// SleepPrefix starts the names of sleeps (the n-th Job.Sleep of a
	// handler's run is "ax:sleep:<n>"); step names may not start with
	// ReservedStepPrefix.
	SleepPrefix        = "ax:sleep:"
	ReservedStepPrefix = "ax:"
)

// Outcomes that are no attempt's end (OutcomeStep) or end it without a
// failure (OutcomeSleeping).
const (
	// OutcomeStep asks the orchestrator to store a step of the running
	// attempt (Report.Step, its result in Result or ResultObject); the
	// attempt goes on.
	OutcomeStep Outcome = "step"
	// OutcomeSleeping ends the attempt in a durable sleep (Report.Step
	// names it, RetryAfter is its length): the task waits, retrying and
	// without spending an attempt, and the same attempt runs again after
	// the sleep.
	OutcomeSleeping Outcome = "sleeping"
)

// KindStep is an event that stored a step of the running attempt in the
// task's record (its state does not change).
const KindStep EventKind = "step"

// Step is a durable step or sleep in a task's record.
type Step struct {
	// Name is the step's name, unique in its task; sleeps are named
	// SleepPrefix and their rank in the handler's run.
	Name string `json:"name"`
	// Result is the step's result (JSON) when it is at most
	// StepInlineLimit; a larger one is in ResultObject.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultObject, ResultBucket and ResultDigest name a larger result
	// in the object store of the task's capability.
	ResultObject string `json:"result_object,omitempty"`
	ResultBucket string `json:"result_bucket,omitempty"`
	ResultDigest string `json:"result_digest,omitempty"`
	// SleepUntil is, for a sleep, when it ends.
	SleepUntil *time.Time `json:"sleep_until,omitempty"`
	// Attempt, ExecutionID and Executor are the attempt that stored it.
	Attempt     int    `json:"attempt"`
	ExecutionID string `json:"execution_id"`
	Executor    string `json:"executor,omitempty"`
	// At is when the orchestrator stored it.
	At time.Time `json:"at"`
}

// IsSleep reports whether s is a sleep rather than a step.
func (s Step) IsSleep() bool { return strings.HasPrefix(s.Name, SleepPrefix) }

// FindStep returns the task's step of that name.
func (t *Task) FindStep(name string) (Step, bool) {
	for _, s := range t.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}

// StepsInlineBytes is the size of the task's inline step results together.
func (t *Task) StepsInlineBytes() int {
	n := 0
	for _, s := range t.Steps {
		n += len(s.Result)
	}
	return n
}

// SleepName is the name of the n-th (1-based) sleep of a handler's run.
func SleepName(n int) string { return fmt.Sprintf("%s%d", SleepPrefix, n) }

// StepObjectName is the object-store name of a step result over
// StepInlineLimit, stored by the attempt executionID: one name per step
// (its name's SHA-256, so any name fits a subject token).
func StepObjectName(id, executionID, name string) string {
	sum := sha256.Sum256([]byte(name))
	return "steps/" + id + "/" + executionID + "/" + hex.EncodeToString(sum[:16])
}

// ValidateStepName says what is wrong with a step's name ("" when it is
// fine): 1–MaxStepNameBytes bytes of UTF-8 without control characters,
// not starting with ReservedStepPrefix (unless sleep: a sleep's own name).
func ValidateStepName(name string, sleep bool) error {
	switch {
	case name == "":
		return fmt.Errorf("a step needs a name")
	case len(name) > MaxStepNameBytes:
		return fmt.Errorf("step name %.40q… is %d bytes; the limit is %d", name, len(name), MaxStepNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("step name %q is not UTF-8", name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("step name %q holds a control character", name)
	case sleep && !strings.HasPrefix(name, SleepPrefix):
		return fmt.Errorf("sleep name %q does not start with %q", name, SleepPrefix)
	case !sleep && strings.HasPrefix(name, ReservedStepPrefix):
		return fmt.Errorf("step name %q starts with %q, which AX reserves (its sleeps)", name, ReservedStepPrefix)
	}
	return nil
}

// StepReply is the answer to a step's direct request (a report of status
// OutcomeStep on ax.direct.task.completed.<type>): the step as the task's
// record holds it (the one stored now, or the one an earlier request of the
// attempt stored), or why it was refused, or Error alone when it could not
// be decided (ask again).
type StepReply struct {
	// Error says why the request was not decided: ask again.
	Error string `json:"error,omitempty"`
	// Step is the stored step, with Revision the task's revision holding it.
	Step     *Step  `json:"step,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// Refused says why the step is not stored and never will be for this
	// attempt: it is no longer the task's current one (taken over,
	// superseded, the task ended), or the step breaks a limit.
	Refused string `json:"refused,omitempty"`
	// Lost, with Refused, says the attempt is no longer the reporting
	// executor's (taken over, superseded, ended): it should stop without
	// reporting an outcome.
	Lost bool `json:"lost,omitempty"`
}
