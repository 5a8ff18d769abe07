package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// run fetches batches and mirrors them until ctx ends.
func (m *Mirror) run(ctx context.Context) {
	fetchBackoff := m.backoff()
	for ctx.Err() == nil {
		msgs, err := m.fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			delay := fetchBackoff.NextBackOff()
			m.log.Warn().Err(err).Dur("retry_in", delay).Msg("fetch from AX_TASKS failed; retrying")
			sleep(ctx, delay)
			if consumerMissing(err) {
				m.rebind(ctx) // deleted or lost: without it the mirror would idle for ever
			}
			continue
		}
		fetchBackoff.Reset()
		if len(msgs) == 0 {
			continue
		}
		recs, msgs := m.decode(msgs)
		ok, err := m.writeWithRetry(ctx, msgs, buildBatch(recs))
		if err != nil {
			m.log.Warn().Err(err).Msg("mirror loop aborted mid-batch")
			return
		}
		if !ok {
			return // stopping with MySQL down: the batch is redelivered later
		}
		if h := m.hooks.afterCommit; h != nil {
			if err := h(len(recs)); err != nil {
				m.log.Warn().Err(err).Msg("mirror loop aborted before ack")
				return
			}
		}
		for _, msg := range msgs {
			if err := msg.Ack(); err != nil {
				m.log.Debug().Err(err).Str("subject", msg.Subject()).Msg("ack failed; the event will be redelivered and skipped")
			}
		}
		m.noteWritten(recs)
	}
}

// fetch returns the next batch: whatever is pending right away, or, when
// idle, the first event to arrive within FetchWait plus what follows it.
func (m *Mirror) fetch(ctx context.Context) ([]jetstream.Msg, error) {
	msgs, err := m.fetchNoWait(m.cfg.Batch)
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	fctx, cancel := context.WithTimeout(ctx, m.cfg.FetchWait)
	defer cancel()
	b, err := m.consumer().Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		return nil, ignoreTimeout(err)
	}
	for msg := range b.Messages() {
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return nil, ignoreTimeout(b.Error())
	}
	more, err := m.fetchNoWait(m.cfg.Batch - len(msgs))
	if err != nil {
		m.log.Debug().Err(err).Msg("fetch after the first event failed")
	}
	return append(msgs, more...), nil
}

func (m *Mirror) fetchNoWait(n int) ([]jetstream.Msg, error) {
	if n <= 0 {
		return nil, nil
	}
	b, err := m.consumer().FetchNoWait(n)
	if err != nil {
		return nil, ignoreTimeout(err)
	}
	var msgs []jetstream.Msg
	for msg := range b.Messages() {
		msgs = append(msgs, msg)
	}
	if len(msgs) == 0 {
		return nil, ignoreTimeout(b.Error())
	}
	return msgs, nil
}

// consumerMissing reports whether a fetch failed because the mirror's
// consumer may not exist (a pull to a missing consumer has no responders).
func consumerMissing(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}

// rebind creates the mirror's consumer again (it resumes after the last
// acknowledged event, or from the start: writes are idempotent).
func (m *Mirror) rebind(ctx context.Context) {
	cons, err := m.js.CreateOrUpdateConsumer(ctx, subject.StreamTasks, m.consumerConfig())
	if err != nil {
		m.log.Warn().Err(err).Msg("cannot recreate the mirror's consumer; retrying")
		return
	}
	m.mu.Lock()
	m.cons = cons
	m.mu.Unlock()
	m.log.Warn().Msg("the mirror's consumer was missing and has been recreated")
}

func (m *Mirror) consumer() jetstream.Consumer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cons
}

func ignoreTimeout(err error) error {
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) {
		return nil
	}
	return err
}

// decode turns messages into records and returns them with the messages
// to acknowledge once they are written. An undecodable message can never be
// mirrored: it is logged and terminated so it does not block the stream.
func (m *Mirror) decode(msgs []jetstream.Msg) ([]record, []jetstream.Msg) {
	recs := make([]record, 0, len(msgs))
	ok := make([]jetstream.Msg, 0, len(msgs))
	for _, msg := range msgs {
		md, err := msg.Metadata()
		if err != nil {
			m.log.Error().Err(err).Str("subject", msg.Subject()).Msg("message without JetStream metadata skipped")
			_ = msg.Term()
			continue
		}
		r, err := decodeRecord(md.Sequence.Stream, msg.Subject(), msg.Data())
		if err != nil {
			m.log.Error().Err(err).Uint64("seq", md.Sequence.Stream).Str("subject", msg.Subject()).
				Msg("undecodable task event skipped; it stays in AX_TASKS")
			_ = msg.TermWithReason("undecodable task event")
			continue
		}
		recs = append(recs, r)
		ok = append(ok, msg)
	}
	return recs, ok
}

// decodeRecord parses one AX_TASKS message.
func decodeRecord(seq uint64, subj string, data []byte) (record, error) {
	var ev task.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return record{}, err
	}
	id := subject.TaskID(subj)
	if id == "" || id == subj {
		id = ev.Task.ID
	}
	if id == "" || ev.To == "" {
		return record{}, errors.New("event without task id or state")
	}
	return record{Seq: seq, TaskID: id, Event: ev}, nil
}

// writeWithRetry writes b until it succeeds, backing off while MySQL fails
// and keeping the messages' ack deadline alive. It reports false if ctx
// ended first (the batch stays unacknowledged), and an error only when a
// test hook simulated a crash. The first attempt runs even when ctx has
// ended, so Stop flushes the batch in hand when MySQL is up.
func (m *Mirror) writeWithRetry(ctx context.Context, msgs []jetstream.Msg, b batch) (bool, error) {
	if len(b.events) == 0 {
		return true, nil
	}
	var crash error
	var mid func() error
	if h := m.hooks.midBatch; h != nil {
		mid = func() error { crash = h(); return crash }
	}
	bo := m.backoff()
	lastProgress := m.cfg.Now()
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.WriteTimeout)
		err := writeBatch(wctx, m.db, b, mid)
		cancel()
		if crash != nil {
			return false, crash
		}
		if err == nil {
			m.recovered(attempt)
			return true, nil
		}
		m.setDown(err)
		delay := bo.NextBackOff()
		ev := m.log.Warn()
		if attempt == 1 {
			ev = m.log.Error()
		}
		ev = ev.Err(err).Int("attempt", attempt).Int("batch_events", len(b.events)).Dur("retry_in", delay)
		if lag, lerr := m.consumerLag(ctx); lerr == nil {
			ev = ev.Uint64("lag_events", lag)
		}
		ev.Msg("writing to MySQL failed; holding the batch unacknowledged and retrying")
		if ctx.Err() != nil || !sleep(ctx, delay) {
			return false, nil
		}
		if now := m.cfg.Now(); now.Sub(lastProgress) > m.cfg.AckWait/3 {
			for _, msg := range msgs {
				_ = msg.InProgress()
			}
			lastProgress = now
		}
	}
}

// recovered clears the outage state after a successful write and logs the
// end of an outage.
func (m *Mirror) recovered(attempts int) {
	m.mu.Lock()
	since := m.stats.downSince
	m.stats.downSince = time.Time{}
	m.stats.lastError = ""
	m.mu.Unlock()
	if attempts > 1 || !since.IsZero() {
		m.log.Info().Int("attempts", attempts).Dur("down_for", m.cfg.Now().Sub(since)).Msg("MySQL reachable again; mirror resumed")
	}
}

// noteWritten records the progress Lag reports.
func (m *Mirror) noteWritten(recs []record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.batches++
	m.stats.written += uint64(len(recs))
	for _, r := range recs {
		if r.Seq > m.stats.lastSeq {
			m.stats.lastSeq = r.Seq
			m.stats.lastEventAt = r.Event.At
		}
	}
}

// backoffState is the exponential backoff between retries (with jitter,
// never giving up).
type backoffState struct{ b *backoff.ExponentialBackOff }

func newBackoff(minDelay, maxDelay time.Duration) *backoffState {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = minDelay
	b.MaxInterval = maxDelay
	b.MaxElapsedTime = 0
	b.Reset()
	return &backoffState{b: b}
}

// Reset starts the delays over from the minimum.
func (s *backoffState) Reset() { s.b.Reset() }

// NextBackOff returns the next delay.
func (s *backoffState) NextBackOff() time.Duration {
	d := s.b.NextBackOff()
	if d == backoff.Stop {
		return s.b.MaxInterval
	}
	return d
}
