// Package direct sends a message to the orchestrators as a direct request
// (subject.Direct) before it would be stored: the orchestrator that takes
// it applies it and only then answers, so the message costs no stored
// write of its own. Send reports whether it was applied; when it was not
// (any other answer, no orchestrator, a timeout), the caller stores the
// message on its own subject as it always could.
package direct

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

const (
	// Timeout bounds one direct request: a little longer than an
	// orchestrator takes at most to apply it.
	Timeout = 5 * time.Second
	// Pause: after a direct request got no answer in time (no
	// orchestrator took it, or the server refused the subject, as a
	// permission configuration older than direct requests does), messages
	// are stored for this long before the next is sent directly.
	Pause = 30 * time.Second
)

// Sender sends direct requests on one connection. Its zero value is not
// usable: use New.
type Sender struct {
	nc *nats.Conn
	// paused is when (Unix ns) messages are next sent directly.
	paused atomic.Int64
	// untargeted is when (Unix ns) requests are next addressed to one
	// orchestrator (SendBatchTo).
	untargeted atomic.Int64
	// onPause is told why a pause began.
	onPause func(subj string, err error)
}

// New returns a Sender on nc. onPause, when not nil, is called (once per
// pause) with the subject and error of the request that began a pause.
func New(nc *nats.Conn, onPause func(subj string, err error)) *Sender {
	return &Sender{nc: nc, onPause: onPause}
}

// Send sends msg (its stored subject, data and headers) as a direct
// request and reports whether an orchestrator answered that it applied it.
// On false, with the reason, the caller stores msg instead.
func (s *Sender) Send(parent context.Context, msg *nats.Msg) (bool, string) {
	now := time.Now().UnixNano()
	if now < s.paused.Load() {
		return false, "direct requests paused"
	}
	// Leave the caller half of its time to store the message if this
	// request is not answered. No responders answers at once (no
	// orchestrator running, or only ones older than direct requests):
	// store this one, try the next. A whole Timeout without an answer may
	// be a refused subject: pause.
	rep, err := s.request(parent, &nats.Msg{Subject: subject.Direct(msg.Subject), Data: msg.Data, Header: msg.Header}, true)
	if err != nil {
		return false, err.Error()
	}
	var r task.DirectReply
	if err := wirejson.Unmarshal(rep.Data, &r); err != nil {
		return false, "unreadable reply: " + err.Error()
	}
	return r.Error == "", r.Error
}

// MaxBatch bounds the messages of one batch direct request
// (subject.DirectBatch).
const MaxBatch = 256

// SendBatch sends bodies, each what would be stored on subj (with the
// headers h), as one batch direct request, and reports which of them an
// orchestrator applied; the caller stores the others. Like Send, it sends
// nothing while direct requests are paused.
func (s *Sender) SendBatch(parent context.Context, subj string, h nats.Header, bodies [][]byte) []bool {
	return s.SendBatchTo(parent, "", subj, h, bodies)
}

// TargetPause: after a direct request addressed to one orchestrator got
// no answer in time (it hung, or the server refused the subject, as a
// permission configuration older than addressed requests does), requests
// go to all orchestrators for this long.
const TargetPause = 5 * time.Minute

// SendBatchTo is SendBatch addressed first to the orchestrator whose node
// token is node (subject.DirectTo; "" for none): when no orchestrator
// answers there (it stopped), or it hangs, the batch goes to them all.
func (s *Sender) SendBatchTo(parent context.Context, node, subj string, h nats.Header, bodies [][]byte) []bool {
	applied := make([]bool, len(bodies))
	now := time.Now().UnixNano()
	if now < s.paused.Load() || len(bodies) == 0 {
		return applied
	}
	msgs := make([]json.RawMessage, len(bodies))
	for i, b := range bodies {
		msgs[i] = b
	}
	data, err := wirejson.Marshal(task.DirectBatch{Messages: msgs})
	if err != nil {
		return applied
	}
	d := subject.DirectBatch(subj)
	if node != "" && now >= s.untargeted.Load() {
		rep, err := s.request(parent, &nats.Msg{Subject: subject.DirectTo(node, d), Data: data, Header: h}, false)
		switch {
		case err == nil:
			return batchApplied(rep, applied)
		case parent.Err() != nil:
			return applied
		case !errors.Is(err, nats.ErrNoResponders):
			s.untargeted.Store(time.Now().Add(TargetPause).UnixNano())
		}
	}
	rep, err := s.request(parent, &nats.Msg{Subject: d, Data: data, Header: h}, true)
	if err != nil {
		return applied
	}
	return batchApplied(rep, applied)
}

// request sends req and waits for its reply, for at most Timeout and half
// of what parent has left. With pause, a whole Timeout without an answer
// (not a shorter wait: it proves nothing) pauses direct requests.
func (s *Sender) request(parent context.Context, req *nats.Msg, pause bool) (*nats.Msg, error) {
	now := time.Now().UnixNano()
	timeout := Timeout
	if dl, ok := parent.Deadline(); ok {
		timeout = min(timeout, time.Until(dl)/2)
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	rep, err := s.nc.RequestMsgWithContext(ctx, req)
	if err != nil && pause && !errors.Is(err, nats.ErrNoResponders) && parent.Err() == nil && timeout == Timeout &&
		s.paused.Swap(time.Now().Add(Pause).UnixNano()) < now && s.onPause != nil {
		s.onPause(req.Subject, err)
	}
	return rep, err
}

// batchApplied fills applied from a batch direct request's reply.
func batchApplied(rep *nats.Msg, applied []bool) []bool {
	var r task.DirectBatchReply
	if wirejson.Unmarshal(rep.Data, &r) != nil || r.Error != "" || len(r.Results) != len(applied) {
		return applied
	}
	for i, res := range r.Results {
		applied[i] = res.Error == ""
	}
	return applied
}
