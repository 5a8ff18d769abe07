package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
)

// Defaults for Config.
const (
	DefaultBatchSize         = 500
	DefaultInterval          = time.Second
	DefaultPublishTimeout    = 10 * time.Second
	DefaultRetention         = 24 * time.Hour
	DefaultRetentionInterval = time.Minute
	DefaultDeleteBatch       = 1000
	DefaultRetryMax          = 5 * time.Second
)

// Config configures a Relay. The zero value is usable.
type Config struct {
	// BatchSize is the most rows claimed, published and marked in one
	// transaction. Default 500.
	BatchSize int
	// Interval is the longest an idle relay waits before it looks for
	// pending rows again. A full batch is followed by the next one at once,
	// and Notify (or Relay.Notify) wakes an idle relay early. Default 1s.
	Interval time.Duration
	// PublishTimeout bounds the wait for JetStream's acknowledgements of a
	// batch; rows not acknowledged by then stay pending for the next round.
	// Default 10s.
	PublishTimeout time.Duration
	// Retention is how long sent rows are kept before they are deleted.
	// Default 24h; negative keeps them forever.
	Retention time.Duration
	// RetentionInterval is how often sent rows past Retention are deleted.
	// Default 1m.
	RetentionInterval time.Duration
	// DeleteBatch bounds the rows one DELETE removes. Default 1000.
	DeleteBatch int
	// RetryMax caps the backoff after a failed round (MySQL or NATS down);
	// the backoff starts at 100ms. Default 5s.
	RetryMax time.Duration
	// Logger receives structured logs (keys in snake_case; every record
	// carries component=outbox_relay). Default nil: no logs.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.DeleteBatch <= 0 {
		c.DeleteBatch = DefaultDeleteBatch
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	return c
}

// Stats are a relay's counters since it was created.
type Stats struct {
	// Rows is the number of rows this relay published and marked sent.
	Rows uint64 `json:"rows"`
	// Tasks is the number of tasks in those rows (a graph counts its tasks).
	Tasks uint64 `json:"tasks"`
	// Batches is the number of transactions that published at least one row.
	Batches uint64 `json:"batches"`
	// Failures is the number of rounds that failed (MySQL or NATS errors).
	Failures uint64 `json:"failures"`
	// Deleted is the number of sent rows this relay deleted after retention.
	Deleted uint64 `json:"deleted"`
	// LastError is the error of the last failed round, "" if none failed.
	LastError string `json:"last_error,omitempty"`
}

// Relay publishes the outbox's pending rows to AX. Several relays (in one
// process or many) may run against the same table: each claims its rows
// with FOR UPDATE SKIP LOCKED, so a row is published by one relay at a time.
// Start and Stop are idempotent; a stopped relay cannot be restarted.
type Relay struct {
	db  *sql.DB
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger

	// skipLocked is false on servers without SKIP LOCKED (MariaDB < 10.6,
	// MySQL < 8.0): relays then wait for each other's batches instead.
	skipLocked bool
	// groupCommit: AX_TASKS turned group commit on when the relay started
	// (orchestrator.TopologyOptions.GroupCommit), so batches are stored as
	// atomic batches.
	groupCommit bool

	mu      sync.Mutex
	started bool
	stopped bool
	stop    chan struct{}      // closed by Stop: finish the batch in hand
	base    context.Context    // ended when Stop's context ends: abandon it
	cancel  context.CancelFunc // ends base
	sub     *nats.Subscription
	wg      sync.WaitGroup
	wake    chan struct{}

	rows, tasks, batches, failures, deleted atomic.Uint64
	lastErr                                 atomic.Pointer[string]
}

// NewRelay returns a relay that reads the outbox in db and publishes on nc.
// It does nothing until Start.
func NewRelay(db *sql.DB, nc *nats.Conn, cfg Config) (*Relay, error) {
	if db == nil || nc == nil {
		return nil, errors.New("new relay: a database and a NATS connection are required")
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(4000, 2*cfg.BatchSize)),
		jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		return nil, fmt.Errorf("new relay: jetstream: %w", err)
	}
	r := &Relay{db: db, nc: nc, js: js, cfg: cfg, log: slog.New(slog.DiscardHandler), skipLocked: true,
		stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	if cfg.Logger != nil {
		r.log = cfg.Logger.With(slog.String("component", "outbox_relay"))
	}
	r.base, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// MySQL error numbers the relay recognises.
const (
	errNoSuchTable = 1146
	errSyntax      = 1064
)

// Start checks the outbox table (it must exist: see Migrate), subscribes to ax.outbox.notify and starts relaying in
// the background. It returns once the relay runs.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopped:
		return ErrRelayStopped
	case r.started:
		return nil
	}
	if err := r.probe(ctx); err != nil {
		return err
	}
	if s, err := r.js.Stream(ctx, subject.StreamTasks); err == nil {
		r.groupCommit = groupcommit.Enabled(s.CachedInfo().Config)
	}
	sub, err := r.nc.Subscribe(subject.OutboxNotify, func(*nats.Msg) { r.Notify() })
	if err != nil {
		return fmt.Errorf("start relay: subscribe to %s: %w", subject.OutboxNotify, err)
	}
	r.sub, r.started = sub, true
	r.wg.Add(2)
	go r.run()
	go r.retain()
	r.log.Info("outbox relay started", slog.Int("batch_size", r.cfg.BatchSize), slog.Duration("interval", r.cfg.Interval), slog.Bool("skip_locked", r.skipLocked))
	return nil
}

// probe checks that the table exists and whether SKIP LOCKED is supported.
func (r *Relay) probe(ctx context.Context) error {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("start relay: %w", err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, "SELECT id FROM "+Table+" WHERE 1 = 0 FOR UPDATE SKIP LOCKED")
	var my *mysql.MySQLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &my) && my.Number == errNoSuchTable:
		return fmt.Errorf("start relay: table %s does not exist: run outbox.Migrate (ax relay does) or apply outbox.Schema(): %w", Table, err)
	case errors.As(err, &my) && my.Number == errSyntax:
		r.skipLocked = false
		r.log.Warn("this MySQL has no SKIP LOCKED (MariaDB 10.6+ and MySQL 8.0+ do): relays will take turns instead of working in parallel")
		return nil
	}
	return fmt.Errorf("start relay: %w", err)
}

// Notify wakes the relay if it is idle: rows were committed.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stop stops claiming rows, lets the batch in hand finish (publish and mark,
// bounded by ctx; a batch abandoned when ctx ends is rolled back and its
// rows published again later, without creating duplicate tasks) and waits
// for the relay's goroutines. It does not close the database or the
// connection. Stop before Start is a no-op; Stop is idempotent.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	close(r.stop)
	started := r.started
	r.mu.Unlock()
	if !started {
		r.cancel()
		return nil
	}
	_ = r.sub.Unsubscribe()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		r.cancel()
		return nil
	case <-ctx.Done():
		r.cancel()
		<-done
		return ctx.Err()
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() Stats {
	s := Stats{Rows: r.rows.Load(), Tasks: r.tasks.Load(), Batches: r.batches.Load(),
		Failures: r.failures.Load(), Deleted: r.deleted.Load()}
	if e := r.lastErr.Load(); e != nil {
		s.LastError = *e
	}
	return s
}

// Backlog reads the outbox's pending rows (of every relay).
func (r *Relay) Backlog(ctx context.Context) (Backlog, error) { return ReadBacklog(ctx, r.db) }

// stopping reports whether Stop was called.
func (r *Relay) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// sleep waits d, or less when woken (if wakeable); false when stopping.
func (r *Relay) sleep(d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	wake := r.wake
	if !wakeable {
		wake = nil
	}
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	case <-wake:
		return true
	}
}

// run relays batches until Stop: a full batch is followed by the next at
// once, a partial one by a wait of Interval (or a wake-up), a failure by a
// growing backoff.
func (r *Relay) run() {
	defer r.wg.Done()
	var backoff time.Duration
	for !r.stopping() {
		n, err := r.relayBatch()
		if err != nil {
			r.failures.Add(1)
			msg := err.Error()
			r.lastErr.Store(&msg)
			backoff = min(max(2*backoff, 100*time.Millisecond), r.cfg.RetryMax)
			r.log.Warn("outbox relay round failed; rows stay pending", slog.Any("error", err), slog.Int("rows", n), slog.Duration("retry_in", backoff))
			if !r.sleep(backoff, false) {
				return
			}
			continue
		}
		backoff = 0
		if n >= r.cfg.BatchSize {
			continue
		}
		if !r.sleep(r.cfg.Interval, true) {
			return
		}
	}
}

// pending is a claimed row.
type pending struct {
	id      uint64
	taskID  string
	subject string
	body    []byte
	tasks   int
}

// relayBatch claims up to BatchSize pending rows, publishes them, marks the
// acknowledged ones sent (and counts a failed publish on the others) and
// commits. It returns the number of rows claimed.
func (r *Relay) relayBatch() (int, error) {
	ctx, cancel := context.WithTimeout(r.base, r.cfg.PublishTimeout+30*time.Second)
	defer cancel()
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	q := "SELECT id, task_id, subject, body, tasks FROM " + Table + " WHERE sent_at IS NULL ORDER BY id LIMIT ? FOR UPDATE"
	if r.skipLocked {
		q += " SKIP LOCKED"
	}
	rows, err := tx.QueryContext(ctx, q, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("claim rows: %w", err)
	}
	var batch []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.id, &p.taskID, &p.subject, &p.body, &p.tasks); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read rows: %w", err)
		}
		batch = append(batch, p)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("read rows: %w", err)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read rows: %w", err)
	}
	if len(batch) == 0 {
		return 0, tx.Commit()
	}
	sent, failed, pubErr := r.publish(ctx, batch)
	if len(sent) > 0 {
		if err := execIn(ctx, tx, "UPDATE "+Table+" SET sent_at = UTC_TIMESTAMP(6) WHERE id IN ", sent); err != nil {
			return len(batch), fmt.Errorf("mark %d rows sent: %w", len(sent), err)
		}
	}
	if len(failed) > 0 {
		msg := pubErr.Error()
		if len(msg) > 1000 {
			msg = msg[:1000]
		}
		if err := execIn(ctx, tx, "UPDATE "+Table+" SET attempts = attempts + 1, last_error = ? WHERE id IN ", failed, msg); err != nil {
			return len(batch), fmt.Errorf("record failed publishes: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return len(batch), fmt.Errorf("commit: %w", err)
	}
	if len(sent) > 0 {
		var tasks int
		for _, p := range batch {
			tasks += p.tasks
		}
		r.rows.Add(uint64(len(sent)))
		r.batches.Add(1)
		if len(failed) == 0 {
			r.tasks.Add(uint64(tasks))
		} else {
			r.tasks.Add(uint64(len(sent))) // approximate when a graph failed
		}
		r.log.Debug("outbox batch relayed", slog.Int("rows", len(sent)))
	}
	if pubErr != nil {
		return len(batch), fmt.Errorf("publish: %d of %d rows not acknowledged: %w", len(batch)-len(sent), len(batch), pubErr)
	}
	return len(batch), nil
}

// publish publishes a batch pipelined and waits for the acknowledgements.
// It returns the ids of the rows JetStream stored (a duplicate, published
// earlier by a relay that died before marking it, counts as stored), of
// those whose publish failed, and the first error. After an error at
// publish time the rest of the batch is not published (it would fail the
// same way) and counted neither sent nor failed.
func (r *Relay) publish(ctx context.Context, batch []pending) (sent, failed []uint64, firstErr error) {
	msgs := make([]*nats.Msg, len(batch))
	for i, p := range batch {
		msg := nats.NewMsg(p.subject)
		msg.Data = p.body
		id := p.taskID
		if p.subject == subject.GraphSubmit {
			id = "graph-" + id
		}
		msg.Header.Set(subject.HeaderMsgID, subject.SubmitMsgID(id, p.body))
		msgs[i] = msg
	}
	if r.groupCommit {
		// Atomic batches first; what they did not store is published
		// pipelined (a duplicate there counts as stored).
		stored := groupcommit.PublishBatches(ctx, r.nc, msgs)
		var rest []pending
		var restMsgs []*nats.Msg
		for i, ok := range stored {
			if ok {
				sent = append(sent, batch[i].id)
			} else {
				rest, restMsgs = append(rest, batch[i]), append(restMsgs, msgs[i])
			}
		}
		batch, msgs = rest, restMsgs
	}
	futures := make([]jetstream.PubAckFuture, 0, len(batch))
	for i, p := range batch {
		f, err := r.js.PublishMsgAsync(msgs[i])
		if err != nil {
			failed = append(failed, p.id)
			firstErr = fmt.Errorf("publish task %s: %w", p.taskID, err)
			break
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
			sent = append(sent, batch[i].id)
		case err := <-f.Err():
			failed = append(failed, batch[i].id)
			if firstErr == nil {
				firstErr = fmt.Errorf("publish task %s: %w", batch[i].taskID, err)
			}
		case <-ctx.Done():
			if firstErr == nil {
				firstErr = fmt.Errorf("publish task %s: %w", batch[i].taskID, ctx.Err())
			}
			return sent, failed, firstErr
		}
	}
	return sent, failed, firstErr
}

// execIn runs prefix + "(?, …)" over ids, with args before the ids.
func execIn(ctx context.Context, tx *sql.Tx, prefix string, ids []uint64, args ...any) error {
	var q strings.Builder
	q.WriteString(prefix)
	q.WriteByte('(')
	for i, id := range ids {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteByte('?')
		args = append(args, id)
	}
	q.WriteByte(')')
	_, err := tx.ExecContext(ctx, q.String(), args...)
	return err
}

// retain deletes sent rows older than Retention, in bounded batches, every
// RetentionInterval.
func (r *Relay) retain() {
	defer r.wg.Done()
	if r.cfg.Retention < 0 {
		return
	}
	for r.sleep(r.cfg.RetentionInterval, false) {
		n, err := r.deleteSent()
		if err != nil {
			r.log.Warn("outbox retention failed; retried at the next interval", slog.Any("error", err))
		} else if n > 0 {
			r.log.Debug("outbox retention deleted sent rows", slog.Int64("rows", n))
		}
	}
}

// deleteSent deletes sent rows past retention, DeleteBatch at a time, until
// none is left or the relay stops.
func (r *Relay) deleteSent() (int64, error) {
	var total int64
	for !r.stopping() {
		n, err := DeleteSent(r.base, r.db, r.cfg.Retention, r.cfg.DeleteBatch)
		total += n
		r.deleted.Add(uint64(n))
		if err != nil || n < int64(r.cfg.DeleteBatch) {
			return total, err
		}
	}
	return total, nil
}

// DeleteSent deletes up to limit rows sent more than olderThan ago and
// returns how many it deleted (one bounded transaction).
func DeleteSent(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("delete sent rows: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "DELETE FROM "+Table+" WHERE sent_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY sent_at LIMIT ?",
		olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete sent rows: %w", err)
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("delete sent rows: %w", err)
	}
	return n, nil
}

// Backlog describes the outbox's pending rows.
type Backlog struct {
	// Pending is the number of committed rows not yet published.
	Pending int64 `json:"pending"`
	// Oldest is the creation time of the oldest pending row (zero if none).
	Oldest time.Time `json:"oldest,omitempty"`
	// Age is how long the oldest pending row has waited (the relay lag; 0
	// when nothing is pending), measured by the database's clock.
	Age time.Duration `json:"age"`
}

// ReadBacklog counts the pending rows and the age of the oldest.
func ReadBacklog(ctx context.Context, db *sql.DB) (Backlog, error) {
	var b Backlog
	var oldest, now sql.NullString
	err := db.QueryRowContext(ctx, "SELECT COUNT(*), DATE_FORMAT(MIN(created_at), '%Y-%m-%d %H:%i:%s.%f'), DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:%i:%s.%f') FROM "+Table+" WHERE sent_at IS NULL").
		Scan(&b.Pending, &oldest, &now)
	if err != nil {
		return b, fmt.Errorf("read outbox backlog: %w", err)
	}
	if oldest.Valid && now.Valid {
		const layout = "2006-01-02 15:04:05.999999"
		o, err1 := time.Parse(layout, oldest.String)
		n, err2 := time.Parse(layout, now.String)
		if err1 == nil && err2 == nil {
			b.Oldest, b.Age = o, max(0, n.Sub(o))
		}
	}
	return b, nil
}
