// Package groupcommit lets writes to one stream share an fsync.
//
// A JetStream server that syncs every write (sync_interval: always) stores
// each published message with its own fsync, one after another per stream:
// a disk that syncs in 0.3 ms caps a stream near 3,500 messages/s however
// many publishers wait. An atomic batch (the stream's AllowAtomicPublish) is
// written whole and synced once, at a fixed cost of a few milliseconds. So a
// Committer publishes a write on its own while few wait, and the writes that
// queued up behind the ones in flight as one atomic batch: under load the
// batches grow until the disk keeps up (group commit, as databases do).
//
// Every write keeps its own compare-and-set header. A batch is all or
// nothing: when the server refuses it (one write's expected revision is
// stale, or anything else), or no answer comes, each of its writes is
// published again on its own and gets its own answer. A batch that was
// committed although its answer was lost makes those writes fail their
// compare-and-set, which writers already treat as "re-read and decide", as
// for any publish whose acknowledgement is lost.
package groupcommit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/jspub"
)

// Defaults of Options.
const (
	// DefaultMinBatch is the fewest queued writes sent as one batch: a
	// batch costs about what 13 single synced writes cost on the disk we
	// measured (the server stages it in a store of its own first). Below
	// it, writes go on their own, concurrently; under load the queue grows
	// past it at once.
	DefaultMinBatch = 16
	// DefaultMaxBatch bounds a batch (the server allows 1,000).
	DefaultMaxBatch = 256
	// DefaultInFlight is how many groups (a batch, or single writes) are
	// in flight at once; the rest queue and form the next batch.
	DefaultInFlight = 2
	// DefaultTimeout bounds a batch's commit before its writes are
	// published again on their own.
	DefaultTimeout = 5 * time.Second
)

// MetadataKey is the AX_TASKS metadata entry ("true") that turns group
// commit on for the whole deployment: orchestrators batch their record
// writes and the SDK stores large SubmitMany calls as atomic batches. An
// operator sets it (ax topology --group-commit) when the server syncs every
// write; Enabled reads it.
const MetadataKey = "ax.group_commit"

// Enabled reports whether a stream configuration turns group commit on.
func Enabled(cfg jetstream.StreamConfig) bool { return cfg.Metadata[MetadataKey] == "true" }

// batchesInFlight bounds the batches one PublishBatches call has in flight
// (a server allows 50 per stream by default and refuses more).
const batchesInFlight = 8

// ErrClosed is returned for writes made after Close, or queued when it came.
var ErrClosed = errors.New("group commit: closed")

// Options tune a Committer; zero fields take the defaults.
type Options struct {
	MinBatch int
	MaxBatch int
	InFlight int
	Timeout  time.Duration
	// Committed, if set, is called for every group published: n writes,
	// how is HowBatch (one atomic batch), HowSingle (each on its own) or
	// HowRefused (a batch refused or unanswered, then each on its own).
	Committed func(n int, how string)
	// Refused, if set, is called with why a batch of n writes was not
	// committed (before they are published on their own).
	Refused func(n int, err error)
}

// How a group of writes was published (Options.Committed).
const (
	HowBatch   = "batch"
	HowSingle  = "single"
	HowRefused = "refused"
)

type write struct {
	msg  *nats.Msg
	ack  *jetstream.PubAck
	err  error
	done chan struct{}
}

// Committer publishes writes to one stream, batching those that queue up.
// Its goroutine runs from New to Close.
type Committer struct {
	nc   *nats.Conn
	opts Options

	in   chan *write
	stop chan struct{}
	wg   sync.WaitGroup

	// closing guards closed: a write enters the queue only before Close,
	// so run answers every queued write before it returns.
	closing sync.RWMutex
	closed  bool
}

// New starts a Committer publishing through js. Every write must go to one
// stream that allows atomic publishes.
func New(js jetstream.JetStream, opts Options) *Committer {
	if opts.MinBatch < 2 {
		opts.MinBatch = DefaultMinBatch
	}
	if opts.MaxBatch <= 0 || opts.MaxBatch > 1000 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.MinBatch > opts.MaxBatch {
		opts.MinBatch = opts.MaxBatch
	}
	if opts.InFlight <= 0 {
		opts.InFlight = DefaultInFlight
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	c := &Committer{nc: js.Conn(), opts: opts, in: make(chan *write, opts.MaxBatch), stop: make(chan struct{})}
	c.wg.Add(1)
	go c.run()
	return c
}

// Publish writes msg and returns its acknowledgement, as
// jetstream.PublishMsg does. It returns when the write is acknowledged or
// refused, or when ctx ends (the write may then still be made).
func (c *Committer) Publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	w := &write{msg: msg, done: make(chan struct{})}
	if err := c.enqueue(ctx, w); err != nil {
		return nil, err
	}
	select {
	case <-w.done:
		return w.ack, w.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *Committer) enqueue(ctx context.Context, w *write) error {
	c.closing.RLock()
	defer c.closing.RUnlock()
	if c.closed {
		return ErrClosed
	}
	select {
	case c.in <- w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the Committer once the writes in flight are answered; writes
// still queued fail with ErrClosed.
func (c *Committer) Close() {
	c.closing.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.closing.Unlock()
	c.wg.Wait()
}

// run takes queued writes as groups, at most InFlight groups at once: a
// group is what queued while the previous ones were in flight. A group
// holds at most one compare-and-set on the same subjects (casKey): the
// server checks each write of an atomic batch against the stream before
// the batch, and where the check names a wildcard (every subject of one
// task's history) it does not see that the batch wrote there already, so
// two writes expecting one revision would both be stored. A second one
// waits for the next group, where it is checked against the first.
func (c *Committer) run() {
	defer c.wg.Done()
	slots := make(chan struct{}, c.opts.InFlight)
	var groups sync.WaitGroup
	defer groups.Wait()
	var held []*write // writes that start the next group
	for {
		var first *write
		if len(held) > 0 {
			first, held = held[0], held[1:]
		} else {
			select {
			case first = <-c.in:
			case <-c.stop:
				c.failQueued()
				return
			}
		}
		select {
		case slots <- struct{}{}:
		case <-c.stop:
			first.fail(ErrClosed)
			for _, w := range held {
				w.fail(ErrClosed)
			}
			c.failQueued()
			return
		}
		group := []*write{first}
		keys := map[string]bool{casKey(first.msg): true}
		var next []*write
		for _, w := range held {
			if k := casKey(w.msg); k != "" && keys[k] || len(group) >= c.opts.MaxBatch {
				next = append(next, w)
			} else {
				keys[k] = true
				group = append(group, w)
			}
		}
		held = next
	drain:
		for len(group) < c.opts.MaxBatch {
			select {
			case w := <-c.in:
				if k := casKey(w.msg); k != "" && keys[k] {
					held = append(held, w)
					continue
				}
				keys[casKey(w.msg)] = true
				group = append(group, w)
			default:
				break drain
			}
		}
		groups.Add(1)
		go func() {
			defer groups.Done()
			defer func() { <-slots }()
			c.commit(group)
		}()
	}
}

// casKey names the subjects a write's compare-and-set checks ("" for a
// write without one): its Nats-Expected-Last-Subject-Sequence-Subject, or
// its own subject.
func casKey(m *nats.Msg) string {
	if m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "" {
		return ""
	}
	if s := m.Header.Get("Nats-Expected-Last-Subject-Sequence-Subject"); s != "" {
		return s
	}
	return m.Subject
}

func (c *Committer) failQueued() {
	for {
		select {
		case w := <-c.in:
			w.fail(ErrClosed)
		default:
			return
		}
	}
}

func (w *write) fail(err error) {
	w.err = err
	close(w.done)
}

// commit publishes a group: as one batch when it is large enough, else (or
// when the batch is not committed) each write on its own, concurrently.
func (c *Committer) commit(group []*write) {
	how := HowSingle
	if len(group) >= c.opts.MinBatch {
		last, err := c.batch(group)
		if err == nil {
			c.committed(len(group), HowBatch)
			first := last.Sequence - uint64(len(group)) + 1
			for i, w := range group {
				w.ack = &jetstream.PubAck{Stream: last.Stream, Domain: last.Domain, Sequence: first + uint64(i)}
				close(w.done)
			}
			return
		}
		if c.opts.Refused != nil {
			c.opts.Refused(len(group), err)
		}
		how = HowRefused
	}
	c.committed(len(group), how)
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.ack, w.err = jspub.PublishMsg(ctx, c.nc, w.msg)
			close(w.done)
		}()
	}
	wg.Wait()
}

// batch publishes the group as one atomic batch.
func (c *Committer) batch(group []*write) (*jetstream.PubAck, error) {
	msgs := make([]*nats.Msg, len(group))
	for i, w := range group {
		msgs[i] = w.msg
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	return PublishBatch(ctx, c.nc, msgs)
}

// PublishBatches publishes msgs as atomic batches of at most
// DefaultMaxBatch messages, batchesInFlight at a time, and reports which
// messages a batch stored: none when they are fewer than DefaultMinBatch (a
// batch would cost more than they do). A batch is refused whole, so the caller publishes the
// others on their own, with the de-duplication ids or compare-and-set
// headers that make a second copy of a batch whose answer was lost
// harmless.
func PublishBatches(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) []bool {
	stored := make([]bool, len(msgs))
	if len(msgs) < DefaultMinBatch {
		return stored
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, batchesInFlight)
	for start := 0; start < len(msgs); start += DefaultMaxBatch {
		end := min(start+DefaultMaxBatch, len(msgs))
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if _, err := PublishBatch(ctx, nc, msgs[start:end]); err == nil {
				for i := start; i < end; i++ {
					stored[i] = true
				}
			}
		})
	}
	wg.Wait()
	return stored
}

// PublishBatch publishes msgs (at most 1,000, all to one stream that allows
// atomic publishes) as one atomic batch and returns the acknowledgement of
// its commit: the sequence of its last message. The stream stores a batch's
// messages in order and alone, so the i-th of n has sequence
// Sequence-n+1+i. msgs are not changed. On an error nothing of the batch
// was stored, unless the error is that no answer came before ctx ended or
// DefaultTimeout passed.
func PublishBatch(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	id := nuid.Next()
	n := len(msgs)
	for i, msg := range msgs {
		m := &nats.Msg{Subject: msg.Subject, Data: msg.Data, Header: make(nats.Header, len(msg.Header)+3)}
		for k, v := range msg.Header {
			m.Header[k] = v
		}
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < n-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, fmt.Errorf("publish batch message %d of %d: %w", i+1, n, err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		reply, err := nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("commit batch of %d: %w", n, err)
		}
		var resp struct {
			jetstream.PubAck
			Count int                 `json:"count"`
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &resp); err != nil {
			return nil, fmt.Errorf("commit batch of %d: decode answer: %w", n, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("commit batch of %d: %w", n, resp.Error)
		}
		if resp.Count != n || resp.Sequence < uint64(n) {
			return nil, fmt.Errorf("commit batch of %d: answer counts %d messages up to sequence %d", n, resp.Count, resp.Sequence)
		}
		return &resp.PubAck, nil
	}
	return nil, errors.New("empty batch")
}

func (c *Committer) committed(n int, how string) {
	if c.opts.Committed != nil {
		c.opts.Committed(n, how)
	}
}
