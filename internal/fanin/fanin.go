// Package fanin counts how the members of a fan-in ended: the shards of a
// sharded task, or the upstreams of a task that waits on many.
//
// Each member that ends writes one marker, ax.fanin.<waiter>.<member>.<state>,
// created with an expected last sequence of 0 on ax.fanin.<waiter>.<member>.*
// so a replay never writes a second one, then adds 1 to the waiter's counter
// ax.count.<waiter> (a JetStream counter in AX_COUNTS, de-duplicated by
// member with Nats-Msg-Id). The increment's acknowledgement carries the new
// count, so "how many members ended?" costs nothing extra whatever the
// fan-in's width: no consumer per waiter, no polling, and completing a
// member never reads its siblings.
//
// The counter is a hint. A member counted again after the de-duplication
// window (a crash between increment and acknowledgement, then a late
// replay) counts twice, and a crash between marker and increment counts it
// late (on its replay); so a count that reaches the total is confirmed
// against the markers (CountExact), and the reconciler's look at a waiting
// waiter counts the markers too. Reading every outcome (for an aggregator)
// is one pass over the waiter's markers.
package fanin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Markers writes and counts fan-in markers in the AX_FANIN stream, and
// their counters in AX_COUNTS.
type Markers struct {
	js     jetstream.JetStream
	stream *leaderget.Lazy // both bound at their first info or purge
	counts *leaderget.Lazy
}

// New binds to the AX_FANIN and AX_COUNTS streams, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Markers, error) {
	m := Open(js)
	if err := m.stream.Bind(ctx); err != nil {
		return nil, err
	}
	if err := m.counts.Bind(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Open returns the markers of AX_FANIN and AX_COUNTS without a request:
// the streams are bound at their first use that needs it
// (leaderget.Lazy), so that a restarted orchestrator does not wait for
// their leaders.
func Open(js jetstream.JetStream) *Markers {
	reads := leaderget.New(js)
	return &Markers{js: js, stream: leaderget.NewLazy(js, subject.StreamFanIn, reads), counts: leaderget.NewLazy(js, subject.StreamCounts, reads)}
}

// Mark records how member of waiter ended, counts it, and returns the
// waiter's count after it (a hint: see the package doc). Only the first
// marker of a member is stored; its increment is de-duplicated by member.
func (m *Markers) Mark(ctx context.Context, waiter, member string, o task.MemberOutcome) (int, error) {
	data, err := json.Marshal(o)
	if err != nil {
		return 0, fmt.Errorf("encode fan-in marker %s of %s: %w", member, waiter, err)
	}
	_, err = m.js.Publish(ctx, subject.FanIn(waiter, member, string(o.State)), data,
		jetstream.WithExpectLastSequenceForSubject(0, subject.FanInMember(waiter, member)))
	if err != nil && !store.IsConflict(err) {
		return 0, fmt.Errorf("mark %s of %s as %s: %w", member, waiter, o.State, err)
	}
	// A marker that existed may be a replay whose increment was cut short:
	// increment anyway; the message id makes a recent double a no-op.
	msg := nats.NewMsg(subject.FanInCount(waiter))
	msg.Header.Set("Nats-Incr", "1")
	ack, err := m.js.PublishMsg(ctx, msg, jetstream.WithMsgID(waiter+"|"+member))
	if err != nil {
		return 0, fmt.Errorf("count %s of %s: %w", member, waiter, err)
	}
	if ack.Duplicate || ack.Value == "" {
		return m.Count(ctx, waiter)
	}
	n, err := strconv.Atoi(ack.Value)
	if err != nil {
		return 0, fmt.Errorf("count %s of %s: counter value %q: %w", member, waiter, ack.Value, err)
	}
	return n, nil
}

// Add adds n to waiter's counter, de-duplicated by msgID within the
// stream's window: a re-opened waiter, whose counter was removed when it
// was cancelled, counts again the markers it kept (an overcount is safe:
// the count is a hint confirmed by reading; an undercount would hold it).
func (m *Markers) Add(ctx context.Context, waiter string, n int, msgID string) error {
	if n <= 0 {
		return nil
	}
	msg := nats.NewMsg(subject.FanInCount(waiter))
	msg.Header.Set("Nats-Incr", strconv.Itoa(n))
	if _, err := m.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("add %d to the count of %s: %w", n, waiter, err)
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

// Count returns the waiter's counter: how many members ended, as a hint
// (see the package doc). It is one stream-leader read.
func (m *Markers) Count(ctx context.Context, waiter string) (int, error) {
	msg, err := m.counts.GetLastMsgForSubject(ctx, subject.FanInCount(waiter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read fan-in count of %s: %w", waiter, err)
	}
	var v struct {
		Val string `json:"val"`
	}
	if err := json.Unmarshal(msg.Data, &v); err != nil {
		return 0, fmt.Errorf("decode fan-in count of %s: %w", waiter, err)
	}
	n, err := strconv.Atoi(v.Val)
	if err != nil {
		return 0, fmt.Errorf("decode fan-in count of %s: %q: %w", waiter, v.Val, err)
	}
	return n, nil
}

// Forget removes waiter's counter (its markers stay until its history is
// forgotten).
func (m *Markers) Forget(ctx context.Context, waiter string) error {
	err := m.counts.Purge(ctx, jetstream.WithPurgeSubject(subject.FanInCount(waiter)))
	if err != nil {
		return fmt.Errorf("forget fan-in count of %s: %w", waiter, err)
	}
	return nil
}

// Counts returns how many members of waiter ended in each final state,
// from one read of the stream's subject index (stream info with a subject
// filter, paged), which the stream leader answers: exact (a leader cut off
// by a partition may answer short, never long), at a cost that grows with
// the number of members (for a final check, not every completion). Not
// from a consumer's pending count: a short-lived consumer may be placed on
// a replica that is behind, whose count is short (a long cluster soak
// failed a parent on such a count, and left another waiting).
func (m *Markers) Counts(ctx context.Context, waiter string) (map[task.State]int, error) {
	info, err := m.stream.Info(ctx, jetstream.WithSubjectFilter(subject.FanInWaiter(waiter)))
	if err != nil {
		return nil, fmt.Errorf("count the members of %s: %w", waiter, err)
	}
	out := make(map[task.State]int)
	for subj, n := range info.State.Subjects {
		out[task.State(subj[strings.LastIndexByte(subj, '.')+1:])] += int(n)
	}
	return out, nil
}

// CountExact returns how many members of waiter ended, as Counts counts.
func (m *Markers) CountExact(ctx context.Context, waiter string) (int, error) {
	counts, err := m.Counts(ctx, waiter)
	return Total(counts), err
}

// Total is the sum of counts.
func Total(counts map[task.State]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
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
		// Each read has its own bound: under the caller's deadline alone (a
		// handler's timeout, minutes away) a JetStream reply lost in a
		// partition would hold the read, and its task, until then.
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		out, err := m.readOutcomes(rctx, waiter)
		cancel()
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

// readTimeout bounds one reading of a waiter's markers; Outcomes tries
// again after it.
const readTimeout = 15 * time.Second

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
