// Package queue owns AX's queue streams (submissions, dispatches, reports):
// streams that keep a message until every consumer reading it has
// acknowledged it, and then let it go.
//
// JetStream's work-queue retention does that by deleting each message when
// it is acknowledged. A delete is a write (a tombstone), and with
// `sync_interval: always` each one is its own fsync: three of the nine
// fsyncs a task cost. AX's queue streams therefore use limits retention
// (nothing is removed by a limit: they have none) and are trimmed by
// consumer position instead: Trim removes, per consumer filter, every
// message at or below the consumer's acknowledgement floor, in one purge
// (one fsync for any number of messages). A consumer's progress is written
// by the server about ten times a second, not once per acknowledgement.
//
// Streams created by earlier versions with work-queue retention keep it
// (JetStream cannot change a stream's retention): Trim leaves them alone,
// and Depth counts them the same way.
package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// consumerView is what trimming and counting need of one consumer.
type consumerView struct {
	name     string
	filters  []string // none: the whole stream
	ackFloor uint64   // every message of its filters at or below is acknowledged
	pending  uint64   // not yet delivered + delivered and not acknowledged
	// ax marks one of AX's own durables (subject.IsQueueDurable): only
	// those let a trim go ahead; any other consumer only holds it back.
	ax bool
}

func consumers(ctx context.Context, st jetstream.Stream) ([]consumerView, error) {
	var out []consumerView
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		f := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			f = append([]string{ci.Config.FilterSubject}, f...)
		}
		out = append(out, consumerView{name: ci.Name, filters: f, ackFloor: ci.AckFloor.Stream,
			pending: ci.NumPending + uint64(max(ci.NumAckPending, 0)), ax: subject.IsQueueDurable(ci.Name)})
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("list consumers of %s: %w", st.CachedInfo().Config.Name, err)
	}
	return out, nil
}

// Trimmed reports, per filter subject, the sequence below which a Trim
// removed that filter's messages; pass it back to the next Trim to skip
// purges that would remove nothing.
type Trimmed map[string]uint64

// Trim removes the messages of stream that every consumer reading them has
// acknowledged. A filter's messages are removed up to the lowest
// acknowledgement floor of the consumers whose filters overlap it, so a
// second reader (an operator's debugging consumer, say) holds them back
// rather than losing them. Messages on subjects no consumer reads stay.
// A stream with work-queue retention is left alone.
func Trim(ctx context.Context, js jetstream.JetStream, stream string, done Trimmed) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("trim %s: %w", stream, err)
	}
	if st.CachedInfo().Config.Retention != jetstream.LimitsPolicy {
		return nil
	}
	cs, err := consumers(ctx, st)
	if err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	for f, floor := range floors(cs) {
		if done[f] > last+1 {
			delete(done, f) // the stream was created again: sequences restarted
		}
		if floor == 0 || done[f] > floor {
			continue
		}
		opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSequence(floor + 1)}
		if f != ">" {
			opts = append(opts, jetstream.WithPurgeSubject(f))
		}
		if err := st.Purge(ctx, opts...); err != nil {
			return fmt.Errorf("trim %s (%s) below %d: %w", stream, f, floor+1, err)
		}
		if done != nil {
			done[f] = floor + 1
		}
	}
	return nil
}

// floors returns, for every filter of one of AX's own durables, the
// lowest acknowledgement floor of the consumers whose filters overlap it
// ("" filters: the whole stream, ">"). Only AX's durables say what was
// handled: a filter read by other consumers alone (an operator's viewer,
// created with DeliverNew or AckNone, whose floor says nothing of what AX
// handled) is never trimmed, and such a consumer overlapping AX's filter
// only holds its trim back. Two literal filters overlap only when equal,
// so only wildcard filters are compared pairwise: a queue with thousands
// of per-capability consumers costs a map, not a square.
func floors(cs []consumerView) map[string]uint64 {
	own := map[string]uint64{}   // per filter, the lowest floor of its own readers
	handled := map[string]bool{} // filters one of AX's durables reads
	var wild []string
	for _, c := range cs {
		filters := c.filters
		if len(filters) == 0 {
			filters = []string{">"}
		}
		for _, f := range filters {
			if c.ax {
				handled[f] = true
			}
			cur, seen := own[f]
			if !seen || c.ackFloor < cur {
				own[f] = c.ackFloor
			}
			if !seen && wildcard(f) {
				wild = append(wild, f)
			}
		}
	}
	out := make(map[string]uint64, len(handled))
	for f, floor := range own {
		if !handled[f] {
			continue
		}
		others := wild
		if wildcard(f) {
			others = slices.Collect(maps.Keys(own)) // a wildcard may cover any filter
		}
		for _, g := range others {
			if own[g] < floor && overlap(f, g) {
				floor = own[g]
			}
		}
		out[f] = floor
	}
	return out
}

func wildcard(subj string) bool {
	return subj == ">" || strings.HasSuffix(subj, ".>") || subj == "*" || strings.HasPrefix(subj, "*.") ||
		strings.HasSuffix(subj, ".*") || strings.Contains(subj, ".*.")
}

// Depth is how many messages of stream are still to be handled: not yet
// delivered, or delivered and not acknowledged. A subject no consumer reads
// counts every message stored on it. It is the same figure whatever the
// stream's retention.
func Depth(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("depth of %s: %w", stream, err)
	}
	cs, err := consumers(ctx, st)
	if err != nil {
		return 0, fmt.Errorf("depth: %w", err)
	}
	var n uint64
	literal := map[string]bool{}
	var wild []string
	for _, c := range cs {
		n += c.pending
		if len(c.filters) == 0 {
			wild = append(wild, ">")
		}
		for _, f := range c.filters {
			if wildcard(f) {
				wild = append(wild, f)
			} else {
				literal[f] = true
			}
		}
	}
	if slices.Contains(wild, ">") {
		return n, nil // a consumer reads everything: no subject is unread
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return 0, fmt.Errorf("depth of %s: %w", stream, err)
	}
	for subj, stored := range info.State.Subjects {
		if !literal[subj] && !slices.ContainsFunc(wild, func(w string) bool { return overlap(subj, w) }) {
			n += stored
		}
	}
	return n, nil
}

// Pending is how many messages on subj (a literal subject) are still to be
// handled by the consumer named durable, or stored on subj when that
// consumer does not exist (nobody reads them yet).
func Pending(ctx context.Context, st jetstream.Stream, durable, subj string) (uint64, error) {
	c, err := st.Consumer(ctx, durable) // one consumer info request
	if err == nil {
		ci := c.CachedInfo()
		return ci.NumPending + uint64(max(ci.NumAckPending, 0)), nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, fmt.Errorf("pending on %s: %w", subj, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, fmt.Errorf("pending on %s: %w", subj, err)
	}
	return info.State.Subjects[subj], nil
}

// overlap reports whether some subject matches both filters ("*" one
// token, ">" the rest).
func overlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i < len(at) && at[i] == ">":
			return i < len(bt)
		case i < len(bt) && bt[i] == ">":
			return i < len(at)
		case i == len(at) || i == len(bt):
			return false
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}
