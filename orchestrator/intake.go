package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// intakeSkew is how far apart two stream leaders' clocks may be: a
// submission stamped up to this much after a command may still have been
// sent before it.
const intakeSkew = time.Second

// intakePoll is how often a command that names a task not found yet looks
// again whether the intake has caught up.
const intakePoll = 100 * time.Millisecond

// intakeWait is how long one delivery of such a command waits before it is
// handed back for redelivery (so a stalled intake never holds a handler).
const intakeWait = 30 * time.Second

// errIntakeBehind: a command names a task that may still be a queued
// submission. Transient: the command is delivered again.
var errIntakeBehind = errors.New("submissions sent before this command are still being taken in")

// awaitIntake returns nil once every submission stored before sent has been
// taken in (so a task not found now does not exist), or errIntakeBehind
// when it has waited intakeWait, or ctx's error.
func (o *Orchestrator) awaitIntake(ctx context.Context, sent time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, intakeWait)
	defer cancel()
	for {
		done, err := o.intakeTakenIn(ctx, sent)
		if err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errIntakeBehind
			}
			return fmt.Errorf("intake: %w", err)
		case <-time.After(intakePoll):
		}
	}
}

// intakeTakenIn reports whether every intake consumer has acknowledged
// every submission stamped before sent. It asks each consumer's leader for
// its ack floor, then reads, through the stream's leader (AX_SUBMIT has no
// direct gets), the first submission above the floor of each of its
// filters: the oldest one it may not have taken in yet.
func (o *Orchestrator) intakeTakenIn(ctx context.Context, sent time.Time) (bool, error) {
	stream, err := o.js.Stream(ctx, subject.StreamSubmit)
	if err != nil {
		return false, err
	}
	for _, l := range o.loops() {
		if l.stream != subject.StreamSubmit {
			continue
		}
		cons, err := stream.Consumer(ctx, l.consumer)
		if err != nil {
			return false, err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return false, err
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue
		}
		for _, filter := range l.filters {
			msg, err := stream.GetMsg(ctx, ci.AckFloor.Stream+1, jetstream.WithGetMsgSubject(filter))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				continue // nothing above the floor on this filter
			case err != nil:
				return false, err
			case !msg.Time.After(sent.Add(intakeSkew)):
				return false, nil
			}
		}
	}
	return true, nil
}
