package mirror

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/subject"
)

// ErrNotEmpty is returned by Rebuild when the database already holds
// mirrored rows.
var ErrNotEmpty = errors.New("the audit database is not empty: rebuild into a new, empty database")

// RebuildOptions tune Rebuild.
type RebuildOptions struct {
	// Batch is the number of events per transaction. Default 500.
	Batch int
	// AllowNonEmpty lets Rebuild write into a database that already has
	// rows (e.g. to finish an interrupted rebuild; writes are idempotent).
	AllowNonEmpty bool
	// Logger receives progress logs. Default: disabled.
	Logger *zerolog.Logger
	// Now is the clock for durations. Default time.Now.
	Now func() time.Time
}

// RebuildResult says what Rebuild wrote.
type RebuildResult struct {
	Events   uint64        `json:"events"`
	LastSeq  uint64        `json:"last_seq"`
	Duration time.Duration `json:"duration"`
}

// Rebuild replays the whole AX_TASKS history, from sequence 1, into db with
// an ordered consumer (the durable mirror consumer is not touched), until it
// has caught up with the stream. The tables it produces equal those of a
// live mirror that saw the same events. db must be empty unless
// AllowNonEmpty; its schema is migrated first.
func Rebuild(ctx context.Context, nc *nats.Conn, db *sql.DB, opts RebuildOptions) (RebuildResult, error) {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Logger == nil {
		l := zerolog.Nop()
		opts.Logger = &l
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger.With().Str("component", "mirror_rebuild").Logger()
	start := opts.Now()
	var res RebuildResult
	if _, err := prepare(ctx, db, nil); err != nil {
		return res, fmt.Errorf("rebuild: %w", err)
	}
	if !opts.AllowNonEmpty {
		var n int
		err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM ax_events LIMIT 1) e) + "+
			"(SELECT COUNT(*) FROM (SELECT 1 FROM ax_tasks LIMIT 1) t) + (SELECT COUNT(*) FROM (SELECT 1 FROM ax_attempts LIMIT 1) a)").Scan(&n)
		if err != nil {
			return res, fmt.Errorf("rebuild: check the database is empty: %w", err)
		}
		if n > 0 {
			return res, fmt.Errorf("rebuild: %w", ErrNotEmpty)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return res, fmt.Errorf("rebuild: jetstream: %w", err)
	}
	stream, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return res, fmt.Errorf("rebuild: bind stream %s: %w", subject.StreamTasks, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("rebuild: read stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		res.Duration = opts.Now().Sub(start)
		return res, nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.TaskAll},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return res, fmt.Errorf("rebuild: create ordered consumer: %w", err)
	}
	log.Info().Uint64("events", info.State.Msgs).Uint64("last_seq", info.State.LastSeq).Msg("rebuilding the audit database")
	// Ask for no more than is left: a Fetch waits until its batch is full.
	left := info.State.Msgs
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		b, err := cons.Fetch(int(min(uint64(opts.Batch), max(left, 1))), jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return res, fmt.Errorf("rebuild: fetch: %w", err)
		}
		var recs []record
		var pending uint64 = 1
		for msg := range b.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				cancel()
				return res, fmt.Errorf("rebuild: message metadata: %w", err)
			}
			pending = md.NumPending
			left = pending
			r, err := decodeRecord(md.Sequence.Stream, msg.Subject(), msg.Data())
			if err != nil {
				log.Error().Err(err).Uint64("seq", md.Sequence.Stream).Msg("undecodable task event skipped")
				continue
			}
			recs = append(recs, r)
		}
		cancel()
		if err := ignoreTimeout(b.Error()); err != nil {
			return res, fmt.Errorf("rebuild: fetch: %w", err)
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("rebuild: %w", ctx.Err())
		}
		if len(recs) > 0 {
			if err := writeBatchRetrying(ctx, db, buildBatch(recs), log); err != nil {
				return res, fmt.Errorf("rebuild: %w", err)
			}
			res.Events += uint64(len(recs))
			res.LastSeq = max(res.LastSeq, recs[len(recs)-1].Seq)
		}
		if pending == 0 {
			break
		}
		if len(recs) == 0 {
			// Nothing came within the wait: done if the stream has nothing newer.
			if info, err = stream.Info(ctx); err != nil {
				return res, fmt.Errorf("rebuild: read stream info: %w", err)
			}
			if info.State.LastSeq <= res.LastSeq {
				break
			}
		}
	}
	res.Duration = opts.Now().Sub(start)
	log.Info().Uint64("events", res.Events).Dur("took", res.Duration).Msg("rebuild finished")
	return res, nil
}

// writeBatchRetrying retries transient failures (deadlocks, a reconnect)
// a few times; anything else fails.
func writeBatchRetrying(ctx context.Context, db *sql.DB, b batch, log zerolog.Logger) error {
	bo := newBackoff(DefaultRetryMin, 5*time.Second)
	for attempt := 1; ; attempt++ {
		err := writeBatch(ctx, db, b, nil)
		if err == nil {
			return nil
		}
		if !transient(err) || attempt >= 10 {
			return explain(err, nil)
		}
		delay := bo.NextBackOff()
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", delay).Msg("write failed; retrying")
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}
