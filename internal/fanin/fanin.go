// Package fanin counts how the members of a fan-in ended: the shards of a
// sharded task, or the upstreams of a task that waits on many.
//
// Each member that ends writes one marker, ax.fanin.<waiter>.<member>.<state>,
// created with an expected last sequence of 0 on ax.fanin.<waiter>.<member>.*
// so a replay never writes a second one. A durable consumer per waiter, which
// nobody pulls from, filters ax.fanin.<waiter>.*.*: the server keeps its
// pending count up to date as markers arrive, so "how many members ended?"
// is one consumer-info request whatever the fan-in's width, and completing a
// member never reads its siblings. Reading every outcome (for an aggregator)
// is one pass over the waiter's markers.
package fanin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Markers writes and counts fan-in markers in the AX_FANIN stream.
type Markers struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// New binds to the AX_FANIN stream, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Markers, error) {
	st, err := js.Stream(ctx, subject.StreamFanIn)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", subject.StreamFanIn, err)
	}
	return &Markers{js: js, stream: st}, nil
}

// Mark records how member of waiter ended. Only the first marker of a
// member counts: a later one (a replay) is a no-op.
func (m *Markers) Mark(ctx context.Context, waiter, member string, o task.MemberOutcome) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode fan-in marker %s of %s: %w", member, waiter, err)
	}
	_, err = m.js.Publish(ctx, subject.FanIn(waiter, member, string(o.State)), data,
		jetstream.WithExpectLastSequenceForSubject(0, subject.FanInMember(waiter, member)))
	if err != nil && !store.IsConflict(err) {
		return fmt.Errorf("mark %s of %s as %s: %w", member, waiter, o.State, err)
	}
	return nil
}

// Ended reports whether member of waiter has a marker.
func (m *Markers) Ended(ctx context.Context, waiter, member string) (bool, error) {
	_, err := m.stream.GetLastMsgForSubject(ctx, subject.FanInMember(waiter, member))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, fmt.Errorf("read marker %s of %s: %w", member, waiter, err)
}

// Count returns how many members of waiter ended: the pending count of the
// waiter's counting consumer, created on first use. Its cost does not
// depend on the number of members, but it may lag: the server updates the
// count just after it acknowledges a marker, so a member that ended last
// can read one short. CountExact does not lag.
func (m *Markers) Count(ctx context.Context, waiter string) (int, error) {
	name := subject.FanInConsumer(waiter)
	for range 2 {
		cons, err := m.stream.Consumer(ctx, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			cons, err = m.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
				Durable:       name,
				Description:   "AX fan-in count of " + waiter,
				FilterSubject: subject.FanInWaiter(waiter),
				AckPolicy:     jetstream.AckNonePolicy,
				DeliverPolicy: jetstream.DeliverAllPolicy,
			})
		}
		if err != nil {
			return 0, fmt.Errorf("count fan-in of %s: %w", waiter, err)
		}
		// Stream.Consumer returned cached info from its lookup; that lookup
		// is the fresh count.
		if info := cons.CachedInfo(); info != nil {
			return int(info.NumPending), nil
		}
	}
	return 0, fmt.Errorf("count fan-in of %s: no consumer info", waiter)
}

// Forget deletes waiter's counting consumer (its markers stay for the
// record until the stream's max age).
func (m *Markers) Forget(ctx context.Context, waiter string) error {
	err := m.stream.DeleteConsumer(ctx, subject.FanInConsumer(waiter))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("forget fan-in of %s: %w", waiter, err)
	}
	return nil
}

// CountExact returns how many members of waiter ended, counted by the
// server as a short-lived consumer is created: exact, at a cost that grows
// with the number of members (for a final check, not every completion).
func (m *Markers) CountExact(ctx context.Context, waiter string) (int, error) {
	return m.countFiltered(ctx, waiter, subject.FanInWaiter(waiter))
}

// CountState returns how many members of waiter ended in state, exactly
// (see CountExact).
func (m *Markers) CountState(ctx context.Context, waiter string, state task.State) (int, error) {
	return m.countFiltered(ctx, waiter, subject.FanInState(waiter, string(state)))
}

func (m *Markers) countFiltered(ctx context.Context, waiter, filter string) (int, error) {
	cons, done, err := scan.Open(ctx, m.js, subject.StreamFanIn, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
	})
	if err != nil {
		return 0, err
	}
	defer done()
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("count %s of %s: %w", filter, waiter, err)
	}
	return int(info.NumPending), nil
}

// Counts returns how many members of waiter ended in each final state.
func (m *Markers) Counts(ctx context.Context, waiter string) (map[task.State]int, error) {
	out := make(map[task.State]int)
	for _, st := range []task.State{task.Succeeded, task.Failed, task.Cancelled, task.Expired} {
		n, err := m.CountState(ctx, waiter, st)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out[st] = n
		}
	}
	return out, nil
}

// ErrIncomplete is returned, wrapped, by Outcomes when fewer markers than
// expected could be read (a replica behind the stream, a read cut short).
var ErrIncomplete = errors.New("fan-in markers incomplete")

// Outcomes reads every marker of waiter once, sorted by shard index then id.
// want is how many members the waiter has: a read that finds fewer (the
// consumer's replica may be behind, or the read is cut short) is tried again
// for up to a minute, then fails with ErrIncomplete — an aggregate over a
// partial read would be wrong.
func (m *Markers) Outcomes(ctx context.Context, waiter string, want int) ([]task.MemberOutcome, error) {
	wait := 50 * time.Millisecond
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := m.readOutcomes(ctx, waiter)
		switch {
		case err == nil && len(out) >= want:
			return out, nil
		case err == nil:
			err = fmt.Errorf("read %d of %d markers of %s: %w", len(out), want, waiter, ErrIncomplete)
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read fan-in of %s: %w", waiter, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// readOutcomes reads the markers a fresh consumer counts, once.
func (m *Markers) readOutcomes(ctx context.Context, waiter string) ([]task.MemberOutcome, error) {
	cons, done, err := scan.Open(ctx, m.js, subject.StreamFanIn, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.FanInWaiter(waiter)},
	})
	if err != nil {
		return nil, err
	}
	defer done()
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read fan-in of %s: %w", waiter, err)
	}
	total := int(info.NumPending)
	out := make([]task.MemberOutcome, 0, total)
	idle := 0
	for len(out) < total {
		batch, err := cons.FetchNoWait(min(total-len(out), 1000))
		if err != nil {
			return nil, fmt.Errorf("read fan-in of %s: %w", waiter, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			var o task.MemberOutcome
			if err := json.Unmarshal(msg.Data(), &o); err != nil {
				return nil, fmt.Errorf("decode fan-in marker %s: %w", msg.Subject(), err)
			}
			out = append(out, o)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read fan-in of %s: %w", waiter, err)
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 500 { // 5 s without a marker: start over
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read fan-in of %s: %w", waiter, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}
