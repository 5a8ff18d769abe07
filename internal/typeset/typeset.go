// Package typeset holds the task types the orchestrators accept new tasks
// for when the number of distinct types is limited, in the AX_TYPES stream.
//
// Each accepted type is one message on ax.type.<type>, written with an
// expected last stream sequence: the sequence of the last record the writer
// has read. The write succeeds only if the writer has seen every type
// recorded before it, so several orchestrators racing on new types each
// count all the others first, and the stream never holds more records than
// the limit of the orchestrator that wrote the last one. The accepted types
// are the first limit records in stream order, so every orchestrator with
// the same limit agrees on them, across restarts, and a lowered limit keeps
// the oldest.
//
// A Set keeps the accepted types in memory (at most limit of them): a type
// already accepted costs no JetStream request, and a new type while the
// limit is reached is refused without one either. Only a type this process
// has not seen yet costs a write (and, after a refused write, the reads of
// the records it missed).
package typeset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
)

// ErrLimit is returned by Admit for a new type once limit types are accepted.
var ErrLimit = errors.New("task type limit reached")

// maxTries bounds the write loop: each refused write means another writer
// recorded a type, which brings the set closer to its limit.
const maxTries = 1000

// Record is the body of ax.type.<type>: when and by whom the type was
// first accepted.
type Record struct {
	// At is when the type was recorded.
	At time.Time `json:"at"`
	// Node is the orchestrator that recorded it.
	Node string `json:"node"`
}

// Set is the set of accepted task types, bounded by its limit. It is safe
// for concurrent use.
type Set struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	limit  int
	node   string
	now    func() time.Time

	mu    sync.RWMutex
	known map[string]struct{} // at most limit types

	// write serializes the writes of new types and guards last.
	write sync.Mutex
	// last is the AX_TYPES sequence up to which known reflects the stream.
	last uint64
}

// New binds the AX_TYPES stream, which must exist, and reads the types
// accepted so far (the first limit records). limit must be positive; node
// names the writer in the records it makes; now is the clock.
func New(ctx context.Context, js jetstream.JetStream, limit int, node string, now func() time.Time) (*Set, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("task type set: limit %d is not positive", limit)
	}
	st, err := js.Stream(ctx, subject.StreamTypes)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", subject.StreamTypes, err)
	}
	s := &Set{js: js, stream: st, limit: limit, node: node, now: now, known: make(map[string]struct{}, limit)}
	s.write.Lock()
	defer s.write.Unlock()
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Limit returns the set's limit.
func (s *Set) Limit() int { return s.limit }

// Len returns the number of types accepted, as far as this process knows.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.known)
}

// Known reports whether typ is accepted, as far as this process knows.
func (s *Set) Known(typ string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.known[typ]
	return ok
}

// Unknown returns the distinct types not accepted yet, as far as this
// process knows, and whether they would all fit within the limit: a graph
// of new types is refused whole instead of recording some of them first.
// Known types cost no allocation.
func (s *Set) Unknown(types []string) (unknown []string, fit bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, t := range types {
		if _, ok := s.known[t]; !ok && !slices.Contains(unknown, t) {
			unknown = append(unknown, t)
		}
	}
	return unknown, len(s.known)+len(unknown) <= s.limit
}

// state says whether typ is accepted and whether the set is full.
func (s *Set) state(typ string) (known, full bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, known = s.known[typ]
	return known, len(s.known) >= s.limit
}

// Admit accepts typ: nil when it is accepted already or was recorded now;
// an error wrapping ErrLimit when limit other types are accepted; any other
// error is JetStream's (try again later).
func (s *Set) Admit(ctx context.Context, typ string) error {
	if known, full := s.state(typ); known {
		return nil
	} else if full {
		return s.limitError(typ)
	}
	s.write.Lock()
	defer s.write.Unlock()
	data, err := json.Marshal(Record{At: s.now().UTC(), Node: s.node})
	if err != nil {
		return fmt.Errorf("encode task type record: %w", err)
	}
	for range maxTries {
		if known, full := s.state(typ); known {
			return nil
		} else if full {
			return s.limitError(typ)
		}
		ack, err := s.js.Publish(ctx, subject.TaskType(typ), data, jetstream.WithExpectLastSequence(s.last))
		if err == nil {
			s.mu.Lock()
			s.known[typ] = struct{}{}
			s.mu.Unlock()
			s.last = ack.Sequence
			return nil
		}
		if !store.IsConflict(err) {
			return fmt.Errorf("record task type %s: %w", typ, err)
		}
		// Another writer recorded a type (perhaps this one) since our
		// last read, or our own write went through unacknowledged.
		if err := s.catchUp(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("record task type %s: %w", typ, consume.ErrContended)
}

func (s *Set) limitError(typ string) error {
	return fmt.Errorf("%w: %q would be a new task type and %d are accepted already", ErrLimit, typ, s.limit)
}

// catchUp reads the records after last into known (up to the limit) and
// moves last to the stream's last sequence. The caller holds write.
func (s *Set) catchUp(ctx context.Context) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", subject.StreamTypes, err)
	}
	end := info.State.LastSeq
	for s.last < end {
		if _, full := s.state(""); full {
			// The first limit records are read: later ones are never
			// accepted, and nothing is written any more.
			s.last = end
			return nil
		}
		msg, err := s.stream.GetMsg(ctx, s.last+1, jetstream.WithGetMsgSubject(subject.TaskTypeAll))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break // the records after last were removed
		}
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", subject.StreamTypes, s.last+1, err)
		}
		if typ, ok := subject.TaskTypeFrom(msg.Subject); ok {
			s.mu.Lock()
			s.known[typ] = struct{}{}
			s.mu.Unlock()
		}
		s.last = msg.Sequence
	}
	s.last = max(s.last, end)
	return nil
}
