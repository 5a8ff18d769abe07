package task

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Event tasks. A task whose spec has WaitFor runs no handler: when it
// would become ready (its dependencies and start time allow it) it waits
// in state waiting for an event, published on
// ax.event.<wait_for.subject>.<wait_for.match> (sdk.Client.Signal), and
// succeeds with the event's data as its result, or expires at its timeout.

// Limits of event tasks.
const (
	// MaxEventData bounds an event's data (the AX_EVENTS stream's
	// max_msg_size): it becomes a result kept inside the record.
	MaxEventData = InlineResultLimit
	// MaxEventMatchLen bounds wait_for.match.
	MaxEventMatchLen = 128
	// MaxEventTimeout bounds wait_for.timeout.
	MaxEventTimeout = 366 * 24 * time.Hour
	// MaxEventSubjectTokens bounds the tokens of wait_for.subject.
	MaxEventSubjectTokens = 7
)

// EventWait is a task's wait_for: the event it waits for and how long.
type EventWait struct {
	// Subject is the event's subject without its match: 1–7 dot-separated
	// tokens of [A-Za-z0-9_-], e.g. "payment.received".
	Subject string `json:"subject"`
	// Match is the last token of the event's subject, matched exactly:
	// the task waits for an event on <Subject>.<Match>, e.g. the order id
	// in "payment.received.order-42". One token of [A-Za-z0-9_-].
	Match string `json:"match"`
	// Timeout is how long the task waits once the wait is registered
	// (when it would otherwise become ready); then it expires.
	Timeout Duration `json:"timeout"`
}

// EventSubject is the subject (without the ax.event. prefix) of the events
// w waits for: <subject>.<match>.
func (w *EventWait) EventSubject() string { return w.Subject + "." + w.Match }

// ValidEventSubject reports whether s can be the subject of an event
// (sdk.Client.Signal): 2–8 dot-separated tokens of [A-Za-z0-9_-], the
// last of which is what a wait_for matches.
func ValidEventSubject(s string) bool {
	dot := strings.LastIndexByte(s, '.')
	return dot > 0 && validEventWaitSubject(s[:dot]) && validEventMatch(s[dot+1:])
}

func validEventWaitSubject(s string) bool {
	return ValidType(s) && strings.Count(s, ".") < MaxEventSubjectTokens
}

func validEventMatch(m string) bool {
	return len(m) > 0 && len(m) <= MaxEventMatchLen && allTokenBytes(m)
}

func allTokenBytes(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return true
}

// EventCancel is a task's cancel_on: the event that cancels it.
//
// The task is cancelled, as an operator's cancel would (a running handler
// is stopped, dependents follow their trigger rules), if it has not
// finished when an event on <Subject>.<Match> is stored after the task was
// accepted. An event stored before (AX_EVENTS keeps the latest event of
// each subject for 7 days) does not cancel it.
type EventCancel struct {
	// Subject is the event's subject without its match, as
	// EventWait.Subject: 1–7 dot-separated tokens of [A-Za-z0-9_-].
	Subject string `json:"subject"`
	// Match is the last token of the event's subject, matched exactly,
	// as EventWait.Match.
	Match string `json:"match"`
}

// EventSubject is the subject (without the ax.event. prefix) of the events
// that cancel the task: <subject>.<match>.
func (c *EventCancel) EventSubject() string { return c.Subject + "." + c.Match }

func (s *Spec) validateCancelOn() error {
	c := s.CancelOn
	switch {
	case c == nil:
		return nil
	case !validEventWaitSubject(c.Subject):
		return &ValidationError{"cancel_on", fmt.Sprintf("subject %q is not 1-%d dot-separated tokens of [A-Za-z0-9_-]", c.Subject, MaxEventSubjectTokens)}
	case !validEventMatch(c.Match):
		return &ValidationError{"cancel_on", fmt.Sprintf("match %q is not one token of 1-%d of [A-Za-z0-9_-]", c.Match, MaxEventMatchLen)}
	}
	return nil
}

func (s *Spec) validateWaitFor() error {
	w := s.WaitFor
	switch {
	case w == nil:
		return nil
	case !validEventWaitSubject(w.Subject):
		return &ValidationError{"wait_for", fmt.Sprintf("subject %q is not 1-%d dot-separated tokens of [A-Za-z0-9_-]", w.Subject, MaxEventSubjectTokens)}
	case !validEventMatch(w.Match):
		return &ValidationError{"wait_for", fmt.Sprintf("match %q is not one token of 1-%d of [A-Za-z0-9_-]", w.Match, MaxEventMatchLen)}
	case w.Timeout <= 0 || w.Timeout.Std() > MaxEventTimeout:
		return &ValidationError{"wait_for", fmt.Sprintf("timeout %s is out of range (0, %s]", w.Timeout.Std(), MaxEventTimeout)}
	case s.Shardable:
		return &ValidationError{"wait_for", "an event task is not shardable"}
	}
	return nil
}

// EventResult is the result of a task that received an event with data:
// the data itself when it is JSON, else the data as a JSON string; null
// when empty.
func EventResult(data []byte) json.RawMessage {
	switch {
	case len(data) == 0:
		return json.RawMessage("null")
	case json.Valid(data):
		return json.RawMessage(data)
	}
	b, _ := json.Marshal(string(data))
	return b
}
