package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// Defaults for SubmitterConfig.
const (
	DefaultSubmitterBatchSize   = 500
	DefaultSubmitterInterval    = time.Second
	DefaultSubmitterMaxBuffered = 10_000
	DefaultSubmitterMaxAttempts = 5
	DefaultSubmitterAckTimeout  = 10 * time.Second
)

// ErrBufferFull is returned by Submit on a FailFast submitter whose buffer
// holds MaxBuffered tasks not yet acknowledged.
var ErrBufferFull = errors.New("submitter buffer full")

// ErrSubmitterClosed is returned by Submit after Close, and reported for
// buffered tasks that Close gave up on when its context ended.
var ErrSubmitterClosed = errors.New("submitter closed")

// SubmitterConfig configures a Submitter. The zero value is usable.
type SubmitterConfig struct {
	// BatchSize is the number of buffered tasks that triggers a flush.
	// Default 500.
	BatchSize int
	// FlushInterval is the longest a buffered task waits before it is
	// published, however few are buffered. Default 1s; any positive
	// duration (a millisecond for low latency) is allowed.
	FlushInterval time.Duration
	// MaxBuffered bounds the tasks submitted but not yet acknowledged by
	// JetStream (buffered and in flight); raised to BatchSize if lower.
	// Default 10,000.
	MaxBuffered int
	// FailFast makes Submit return ErrBufferFull when MaxBuffered tasks are
	// outstanding. Default false: Submit blocks until there is room or its
	// context ends.
	FailFast bool
	// MaxAttempts is how many times a task is published before it is given
	// up (a failed publish is retried with the same Nats-Msg-Id, so a retry
	// of a publish that was in fact stored creates nothing twice).
	// Default 5.
	MaxAttempts int
	// AckTimeout bounds the wait for JetStream's acknowledgement of one
	// publish. Default 10s.
	AckTimeout time.Duration
	// OnError is called once for every task that could not be submitted,
	// with its spec (id filled in) and the error, from the submitter's own
	// goroutine (keep it short: it holds back later acknowledgements).
	// Flush and Close also report failures. Default: none.
	OnError func(spec task.Spec, err error)
}

func (c SubmitterConfig) withDefaults() SubmitterConfig {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultSubmitterBatchSize
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultSubmitterInterval
	}
	if c.MaxBuffered <= 0 {
		c.MaxBuffered = DefaultSubmitterMaxBuffered
	}
	c.MaxBuffered = max(c.MaxBuffered, c.BatchSize)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultSubmitterMaxAttempts
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultSubmitterAckTimeout
	}
	return c
}

// SubmitError reports the tasks that could not be submitted, from Flush or
// Close.
type SubmitError struct {
	// Failed is how many tasks failed.
	Failed int
	// Tasks holds the first failures (up to 10), each naming its task.
	Tasks []error
}

// Error says how many tasks were not submitted and the first failure.
func (e *SubmitError) Error() string {
	if len(e.Tasks) == 0 {
		return fmt.Sprintf("%d tasks not submitted", e.Failed)
	}
	return fmt.Sprintf("%d tasks not submitted; first: %v", e.Failed, e.Tasks[0])
}

// Unwrap returns the recorded failures.
func (e *SubmitError) Unwrap() []error { return e.Tasks }

// SubmitterStats are a submitter's counters.
type SubmitterStats struct {
	// Submitted counts the tasks Submit accepted.
	Submitted uint64
	// Acknowledged counts the tasks JetStream stored.
	Acknowledged uint64
	// Failed counts the tasks given up (each reported to OnError).
	Failed uint64
	// Outstanding is the number of tasks buffered or in flight now.
	Outstanding int
}

// Submitter submits tasks asynchronously in batches: Submit validates a
// spec and buffers it, returning in microseconds; the buffer is published
// with pipelined JetStream publishes when BatchSize tasks are buffered or
// FlushInterval after the oldest buffered one, whichever comes first.
// A task is durable once acknowledged: Flush and Close wait for that. A
// task that cannot be submitted is never dropped silently: it reaches
// OnError with its spec and is counted in the error Flush or Close returns.
// Use it where Submit's round trip per task costs too much (a request path
// producing many tasks); Client.Submit stays the simple durable call.
// A Submitter is safe for concurrent use.
type Submitter struct {
	c   *Client
	js  jetstream.JetStream
	cfg SubmitterConfig

	mu          sync.Mutex
	buf         []pendingTask
	outstanding int
	nextSeq     uint64 // the last sequence number given to a task
	doneSeq     uint64 // every task up to this one is acknowledged or failed
	flushAll    bool   // publish the whole buffer, not only full batches
	closed      bool
	changed     chan struct{} // closed at the next completion (nil: nobody waits)
	failures    []error       // since the last Flush or Close returned
	failedN     int

	kick    chan struct{}
	acks    chan inflight
	stop    chan struct{} // closed by Close once every task completed or it gave up
	aborted atomic.Bool   // Close's context ended: stop retrying, fail the buffer
	done    chan struct{} // closed when both goroutines ended
	closeMu sync.Mutex

	submitted, acknowledged, failed atomic.Uint64
}

// pendingTask is a validated, encoded task waiting for its publish.
type pendingTask struct {
	seq   uint64
	spec  task.Spec // as submitted (its payload clear), for OnError
	subj  string
	data  []byte
	msgID string
}

// inflight is a published task and its acknowledgement to come.
type inflight struct {
	t   pendingTask
	f   jetstream.PubAckFuture // nil: stored in an atomic batch
	err error                  // the publish failed at once
}

// NewSubmitter returns a Submitter that publishes on c's connection. Close
// it to flush and stop it; closing c's connection first fails what is left.
func NewSubmitter(c *Client, cfg SubmitterConfig) (*Submitter, error) {
	cfg = cfg.withDefaults()
	js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(cfg.MaxBuffered),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("new submitter: jetstream: %w", err)
	}
	s := &Submitter{c: c, js: js, cfg: cfg, kick: make(chan struct{}, 1), acks: make(chan inflight, cfg.MaxBuffered),
		stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.flushLoop() }()
	go func() { defer wg.Done(); s.ackLoop() }()
	go func() { wg.Wait(); close(s.done) }()
	return s, nil
}

// Submit validates spec, fills its defaults and id (a sortable unique id
// when empty) and buffers it for publishing; it returns the id. A nil error
// means accepted, not yet durable: Flush or Close waits for durability and
// failures reach OnError. Validation errors return at once. When
// MaxBuffered tasks are outstanding Submit blocks until there is room (ctx
// bounds the wait) or, with FailFast, returns ErrBufferFull. Fields left
// unset take their defaults (see task.Spec).
func (s *Submitter) Submit(ctx context.Context, spec task.Spec) (string, error) {
	if spec.ID == "" {
		spec.ID = task.NewID()
	}
	spec.Normalize()
	if err := spec.Validate(s.c.MaxPayload); err != nil {
		return "", fmt.Errorf("invalid task %s: %w", spec.ID, err)
	}
	wire := spec // spec stays clear for OnError; wire goes out encoded
	if err := s.c.encodeSpec(ctx, &wire); err != nil {
		return "", err
	}
	data, err := wirejson.Marshal(wire)
	if err != nil {
		return "", fmt.Errorf("encode task %s: %w", spec.ID, err)
	}
	t := pendingTask{spec: spec, subj: subject.SubmitLane(spec.PriorityLevel(), spec.Type), data: data, msgID: subject.SubmitMsgID(spec.ID, data)}
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return "", fmt.Errorf("submit task %s: %w", spec.ID, ErrSubmitterClosed)
		}
		if s.outstanding < s.cfg.MaxBuffered {
			break
		}
		if s.cfg.FailFast {
			s.mu.Unlock()
			return "", fmt.Errorf("submit task %s: %w", spec.ID, ErrBufferFull)
		}
		ch := s.waitChange()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return "", fmt.Errorf("submit task %s: waiting for room in the buffer: %w", spec.ID, ctx.Err())
		}
		s.mu.Lock()
	}
	s.nextSeq++
	t.seq = s.nextSeq
	s.buf = append(s.buf, t)
	s.outstanding++
	kick := len(s.buf) == 1 || len(s.buf) >= s.cfg.BatchSize
	s.mu.Unlock()
	s.submitted.Add(1)
	if kick {
		s.wake()
	}
	return spec.ID, nil
}

// waitChange returns a channel closed at the next completion. s.mu is held.
func (s *Submitter) waitChange() <-chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

func (s *Submitter) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Flush publishes everything buffered and waits until every task submitted
// before the call is acknowledged or failed. It returns a *SubmitError if
// tasks failed since the previous Flush or Close returned (each was also
// passed to OnError), or ctx's error.
func (s *Submitter) Flush(ctx context.Context) error {
	s.mu.Lock()
	target := s.nextSeq
	s.flushAll = true
	s.mu.Unlock()
	s.wake()
	if err := s.waitDone(ctx, target); err != nil {
		return err
	}
	return s.takeFailures()
}

// waitDone waits until every task up to seq completed.
func (s *Submitter) waitDone(ctx context.Context, seq uint64) error {
	for {
		s.mu.Lock()
		if s.doneSeq >= seq {
			s.mu.Unlock()
			return nil
		}
		ch := s.waitChange()
		left := s.outstanding
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("flush: %d tasks not yet acknowledged: %w", left, ctx.Err())
		}
	}
}

func (s *Submitter) takeFailures() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failedN == 0 {
		return nil
	}
	err := &SubmitError{Failed: s.failedN, Tasks: s.failures}
	s.failedN, s.failures = 0, nil
	return err
}

// Close stops accepting tasks (Submit returns ErrSubmitterClosed), publishes
// everything buffered and waits until every task is acknowledged or failed,
// like Flush. If ctx ends first, tasks not yet published are failed with
// ErrSubmitterClosed (reported to OnError, never dropped silently), publishes
// in flight get up to AckTimeout for their acknowledgement, and ctx's error
// is returned. Close is idempotent; it does not close the client.
func (s *Submitter) Close(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	target := s.nextSeq
	s.flushAll = true
	if s.changed != nil { // wake blocked Submits: they fail now
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
	s.wake()
	err := s.waitDone(ctx, target)
	if err != nil {
		s.aborted.Store(true)
	}
	close(s.stop)
	<-s.done
	if err != nil {
		_ = s.takeFailures() // the abandoned tasks went to OnError
		return fmt.Errorf("close submitter: %w", err)
	}
	return s.takeFailures()
}

// Stats returns the submitter's counters.
func (s *Submitter) Stats() SubmitterStats {
	s.mu.Lock()
	n := s.outstanding
	s.mu.Unlock()
	return SubmitterStats{Submitted: s.submitted.Load(), Acknowledged: s.acknowledged.Load(), Failed: s.failed.Load(), Outstanding: n}
}

// flushLoop publishes full batches as soon as they are buffered, and
// everything buffered FlushInterval after the oldest task arrived or when
// Flush or Close asks. On stop it publishes what is left (or, aborted,
// fails it) and closes acks so the ack loop ends after the last one.
func (s *Submitter) flushLoop() {
	defer close(s.acks)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		due := false
		select {
		case <-s.kick:
		case <-timer.C:
			armed, due = false, true
		case <-s.stop:
			s.drain()
			return
		}
		for {
			batch := s.take(due)
			if len(batch) == 0 {
				break
			}
			s.publish(batch)
		}
		s.mu.Lock()
		buffered := len(s.buf) > 0
		s.mu.Unlock()
		switch {
		case buffered && !armed:
			timer.Reset(s.cfg.FlushInterval)
			armed = true
		case !buffered && armed:
			timer.Stop()
			armed = false
		}
	}
}

// take removes the next batch from the buffer: a full one, or with all
// (or a pending Flush) whatever is buffered.
func (s *Submitter) take(all bool) []pendingTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.buf)
	switch {
	case n >= s.cfg.BatchSize:
		n = s.cfg.BatchSize
	case all || s.flushAll:
	default:
		return nil
	}
	batch := s.buf[:n:n]
	s.buf = s.buf[n:]
	if len(s.buf) == 0 {
		s.buf, s.flushAll = nil, false
	}
	return batch
}

// drain handles what is buffered when Close stops the loop: published, or
// failed when Close gave up.
func (s *Submitter) drain() {
	for {
		batch := s.take(true)
		if len(batch) == 0 {
			return
		}
		if s.aborted.Load() {
			for _, t := range batch {
				s.acks <- inflight{t: t, err: ErrSubmitterClosed}
			}
			continue
		}
		s.publish(batch)
	}
}

// publish sends a batch pipelined; the ack loop waits for the acks in
// order. With group commit on, it first stores the batch as atomic batches
// (Client.SubmitMany's); what they did not store is published pipelined.
func (s *Submitter) publish(batch []pendingTask) {
	var stored []bool
	if s.c.store.GroupCommit() {
		msgs := make([]*nats.Msg, len(batch))
		for i, t := range batch {
			msgs[i] = s.msg(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
		stored = groupcommit.PublishBatches(ctx, s.c.nc, msgs)
		cancel()
	}
	for i, t := range batch {
		if stored != nil && stored[i] {
			s.acks <- inflight{t: t}
			continue
		}
		f, err := s.js.PublishMsgAsync(s.msg(t))
		s.acks <- inflight{t: t, f: f, err: err}
	}
}

func (s *Submitter) msg(t pendingTask) *nats.Msg {
	m := nats.NewMsg(t.subj)
	m.Data = t.data
	m.Header.Set(subject.HeaderMsgID, t.msgID)
	return m
}

// ackLoop waits for each publish's acknowledgement in publish order (so
// completion is in submission order: Flush waits for a sequence number),
// retries failed publishes and reports what cannot be submitted.
func (s *Submitter) ackLoop() {
	for in := range s.acks {
		err := in.err
		if err == nil && in.f != nil {
			select {
			case ack := <-in.f.Ok():
				if ack.Duplicate {
					err = s.duplicate(in.t)
				}
			case err = <-in.f.Err():
			}
		}
		if err != nil && !errors.Is(err, ErrSubmitterClosed) {
			err = s.retry(in.t, err)
		}
		s.complete(in.t, err)
	}
}

// duplicate handles a publish JetStream de-duplicated: the same submission
// was stored moments ago (a retry), or is the resubmission of an id whose
// earlier submission was rejected, which is evaluated anew as by
// Client.Submit. The body published is the one already built, so a
// payload is not encoded a second time.
func (s *Submitter) duplicate(t pendingTask) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
	defer cancel()
	return s.c.publishSpec(ctx, t.subj, t.spec.ID, t.data)
}

// retry publishes a task again, synchronously, with a growing pause, up to
// MaxAttempts publishes in all.
func (s *Submitter) retry(t pendingTask, err error) error {
	pause := 100 * time.Millisecond
	for attempt := 2; attempt <= s.cfg.MaxAttempts && !s.aborted.Load() && !errors.Is(err, nats.ErrMaxPayload); attempt++ {
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.AckTimeout)
		ack, perr := s.js.PublishMsg(ctx, s.msg(t))
		cancel()
		if perr == nil {
			if ack.Duplicate {
				return s.duplicate(t)
			}
			return nil
		}
		err = perr
	}
	return err
}

// complete records a task's outcome and wakes whoever waits.
func (s *Submitter) complete(t pendingTask, err error) {
	if err != nil {
		err = fmt.Errorf("submit task %s: %w", t.spec.ID, err)
		s.failed.Add(1)
		if s.cfg.OnError != nil {
			s.cfg.OnError(t.spec, err)
		}
	} else {
		s.acknowledged.Add(1)
	}
	s.mu.Lock()
	s.outstanding--
	s.doneSeq = t.seq
	if err != nil {
		s.failedN++
		if len(s.failures) < 10 {
			s.failures = append(s.failures, err)
		}
	}
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	s.mu.Unlock()
}
