package leaderget

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Streamer is what AX's components use of a stream: leader reads, its
// info (a subject index), deleting a message and purging a subject. Both
// a jetstream.Stream and a Lazy stream have it.
type Streamer interface {
	Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error)
	GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error)
	GetLastMsgForSubject(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error)
	DeleteMsg(ctx context.Context, seq uint64) error
	Purge(ctx context.Context, opts ...jetstream.StreamPurgeOpt) error
}

// A Lazy stream is bound when it is first used for something a leader
// read cannot do (Info, DeleteMsg, Purge, GetMsg with options), and its
// leader reads (GetLastMsgForSubject, GetMsg without options) go through
// a Reader, bound or not. Binding asks the stream's leader for the
// stream's info, and a process that binds every stream before it starts
// waits for every leader: an orchestrator restarted during a chaos run
// waited 15 s on a stream that only dependencies use while it served
// nothing. A Lazy stream leaves that wait to the work that needs it. It
// is for streams that do not allow direct gets (every AX stream but an
// R1 AX_TASKS); it is safe for concurrent use.
type Lazy struct {
	js     jetstream.JetStream
	name   string
	reader *Reader

	mu sync.Mutex
	st jetstream.Stream
}

// NewLazy returns the stream name of js, with its leader reads through r
// (r's connection must be js's). It sends nothing.
func NewLazy(js jetstream.JetStream, name string, r *Reader) *Lazy {
	return &Lazy{js: js, name: name, reader: r}
}

// bound returns the stream's handle, binding it first if it is not yet.
// Callers that find it unbound at once each bind it (no caller waits
// past its own context for another's request); the first handle stays.
func (l *Lazy) bound(ctx context.Context) (jetstream.Stream, error) {
	l.mu.Lock()
	st := l.st
	l.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := l.js.Stream(ctx, l.name)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", l.name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st == nil {
		l.st = st
	}
	return l.st, nil
}

// Bind binds the stream now (a check that it exists) if it is not yet.
func (l *Lazy) Bind(ctx context.Context) error {
	_, err := l.bound(ctx)
	return err
}

// GetLastMsgForSubject returns the stream's last message on subj, read
// through its leader.
func (l *Lazy) GetLastMsgForSubject(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	return l.reader.Last(ctx, l.name, subj)
}

// GetMsg returns the stream's message at seq, read through its leader;
// with options (a subject filter), as the bound stream reads it.
func (l *Lazy) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if len(opts) == 0 {
		return l.reader.Seq(ctx, l.name, seq)
	}
	st, err := l.bound(ctx)
	if err != nil {
		return nil, err
	}
	return st.GetMsg(ctx, seq, opts...)
}

// Info returns the stream's info, as jetstream.Stream's Info does.
func (l *Lazy) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	st, err := l.bound(ctx)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx, opts...)
}

// DeleteMsg deletes the message at seq, as jetstream.Stream's DeleteMsg does.
func (l *Lazy) DeleteMsg(ctx context.Context, seq uint64) error {
	st, err := l.bound(ctx)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}

// Purge purges the stream, as jetstream.Stream's Purge does.
func (l *Lazy) Purge(ctx context.Context, opts ...jetstream.StreamPurgeOpt) error {
	st, err := l.bound(ctx)
	if err != nil {
		return err
	}
	return st.Purge(ctx, opts...)
}
