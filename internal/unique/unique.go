// Package unique holds the unique keys of tasks (a spec's unique_key and
// unique_window) in the AX_UNIQUE stream.
//
// The task that holds a key of a type is the one message on
// ax.unique.<type>.<key>: created with an expected last subject sequence
// of 0, so of two submissions racing for a key — in one orchestrator or
// two, before or after a restart — exactly one writes it, and with a
// per-message TTL of the window, so the server removes it when the window
// ends and the next submission with the key holds it anew. Nothing is kept
// in memory: a key holds across orchestrator restarts and fail-overs.
package unique

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
)

// maxTries bounds the claim loop: a holder whose window ends between a
// refused write and the read of it is a rare race, not a loop.
const maxTries = 10

// Holder is the body of ax.unique.<type>.<key>: the task holding the key.
type Holder struct {
	// ID is the task that holds the key.
	ID string `json:"id"`
	// At is when it took it; Until when its window ends.
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
}

// Keys claims unique keys in the AX_UNIQUE stream.
type Keys struct {
	js     jetstream.JetStream
	stream *leaderget.Lazy
}

// New binds to the AX_UNIQUE stream, which must exist.
func New(ctx context.Context, js jetstream.JetStream) (*Keys, error) {
	k := Open(js)
	if err := k.stream.Bind(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// Open returns the keys of AX_UNIQUE without a request: the stream is
// bound at its first use that needs it (leaderget.Lazy), and its claims'
// reads are leader reads, which need no binding.
func Open(js jetstream.JetStream) *Keys {
	return &Keys{js: js, stream: leaderget.NewLazy(js, subject.StreamUnique, leaderget.New(js))}
}

// Claim makes task id the holder of key for taskType for window from now,
// unless a task holds it already: it returns the holder, which is id
// itself when id took it now or earlier (a redelivered submission).
func (k *Keys) Claim(ctx context.Context, taskType, key, id string, window time.Duration, now time.Time) (Holder, error) {
	subj := subject.Unique(taskType, key)
	mine := Holder{ID: id, At: now, Until: now.Add(window)}
	data, err := json.Marshal(mine)
	if err != nil {
		return Holder{}, fmt.Errorf("encode unique key holder: %w", err)
	}
	// Whole seconds, rounded up: the server's TTL resolution.
	ttl := window.Truncate(time.Second)
	if ttl < window {
		ttl += time.Second
	}
	var last uint64 // the holder's message a claim replaces: 0 for none
	for range maxTries {
		_, err := k.js.Publish(ctx, subj, data, jetstream.WithExpectLastSequencePerSubject(last), jetstream.WithMsgTTL(ttl))
		if err == nil {
			return mine, nil
		}
		if !store.IsConflict(err) {
			return Holder{}, fmt.Errorf("claim unique key %q of %s for %s: %w", key, taskType, id, err)
		}
		msg, err := k.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			last = 0
			continue // its window ended in between: claim again
		}
		if err != nil {
			return Holder{}, fmt.Errorf("read holder of unique key %q of %s: %w", key, taskType, err)
		}
		var h Holder
		if err := json.Unmarshal(msg.Data, &h); err != nil {
			return Holder{}, fmt.Errorf("decode holder of unique key %q of %s: %w", key, taskType, err)
		}
		if h.ID == id || now.Before(h.Until) {
			return h, nil
		}
		// Its window ended, but the server has not removed it yet:
		// replace it, compare-and-set against it.
		last = msg.Sequence
	}
	return Holder{}, fmt.Errorf("claim unique key %q of %s for %s: %w", key, taskType, id, consume.ErrContended)
}
