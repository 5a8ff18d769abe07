package mirror

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
)

// Mirror copies AX_TASKS into MySQL. Create it with New or NewFromDSN, then
// Start and Stop it; both are idempotent. Several mirrors may run at once
// against the same database: they share the durable consumer.
type Mirror struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	db     *sql.DB
	ownsDB bool
	dsn    *mysql.Config // nil when the caller passed the *sql.DB
	log    zerolog.Logger
	hooks  hooks

	// life guards the life cycle: Start and Stop.
	life    sync.Mutex
	stopFn  context.CancelFunc
	done    chan struct{}
	stopped bool

	// mu guards what the run loop shares with Lag.
	mu     sync.Mutex
	cons   jetstream.Consumer
	stream jetstream.Stream
	stats  progress
}

// hooks let tests crash the mirror at precise points.
type hooks struct {
	// midBatch runs inside a batch's transaction before it commits; an
	// error rolls it back and makes the run loop exit at once.
	midBatch func() error
	// afterCommit runs after a batch is committed and before it is acked;
	// an error makes the run loop exit at once, as if the process died.
	afterCommit func(events int) error
}

// progress is what the run loop reports to Lag.
type progress struct {
	written     uint64
	batches     uint64
	lastSeq     uint64
	lastEventAt time.Time
	downSince   time.Time
	lastError   string
}

// New returns a mirror that reads AX_TASKS through nc and writes to db. db
// must have been opened with Open (or with parseTime=true and loc=UTC in
// its DSN); the caller keeps ownership of it.
func New(nc *nats.Conn, db *sql.DB, cfg Config) (*Mirror, error) {
	if nc == nil {
		return nil, errors.New("mirror: nil NATS connection")
	}
	if db == nil {
		return nil, errors.New("mirror: nil database")
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("mirror: jetstream: %w", err)
	}
	return &Mirror{cfg: cfg, nc: nc, js: js, db: db, log: cfg.Logger.With().Str("component", "mirror").Logger()}, nil
}

// NewFromDSN opens dsn with Open and returns a mirror that owns the database
// handle (Stop closes it). A malformed DSN is reported here.
func NewFromDSN(nc *nats.Conn, dsn string, cfg Config) (*Mirror, error) {
	parsed, err := ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	db, err := Open(dsn, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	m, err := New(nc, db, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	m.ownsDB, m.dsn = true, parsed
	return m, nil
}

// DB returns the database the mirror writes to.
func (m *Mirror) DB() *sql.DB { return m.db }

// Start checks the database (reachable, credentials, schema version,
// privileges), migrates its schema, binds the durable consumer and starts
// mirroring in the background. Problems an operator must fix (bad
// credentials, missing privileges, a schema newer than this binary) are
// returned as errors that say what to do. If MySQL is merely unreachable,
// Start logs it and returns nil: the mirror keeps retrying in the
// background, because task processing must not depend on the audit mirror.
func (m *Mirror) Start(ctx context.Context) error {
	m.life.Lock()
	defer m.life.Unlock()
	if m.stopped {
		return errors.New("mirror: start after stop")
	}
	if m.stopFn != nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.ConnectTimeout)
	version, err := prepare(pctx, m.db, m.dsn)
	cancel()
	ready := err == nil
	switch {
	case err == nil:
		m.log.Info().Int("schema_version", version).Msg("audit database ready")
	case transient(err):
		m.log.Warn().Err(err).Msg("MySQL is unreachable; the mirror will keep retrying in the background")
		m.setDown(err)
	default:
		return fmt.Errorf("mirror: %w", err)
	}
	// The orchestrator creates AX's streams; a mirror started first, or
	// during a JetStream outage, waits for them.
	var stream jetstream.Stream
	var cons jetstream.Consumer
	err = topology.Retry(ctx, func(ctx context.Context) error {
		if err := topology.Check(ctx, m.js); err != nil {
			return err
		}
		var err error
		if stream, err = m.js.Stream(ctx, subject.StreamTasks); err != nil {
			return fmt.Errorf("bind stream %s: %w", subject.StreamTasks, err)
		}
		if cons, err = m.js.CreateOrUpdateConsumer(ctx, subject.StreamTasks, m.consumerConfig()); err != nil {
			return fmt.Errorf("consumer %s: %w", subject.ConsumerMirror, err)
		}
		return nil
	}, func(err error, wait time.Duration) {
		m.log.Warn().Err(err).Dur("retry_in", wait).Msg("cannot bind to AX's streams yet; waiting")
	})
	if err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	m.mu.Lock()
	m.cons, m.stream = cons, stream
	m.mu.Unlock()

	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); m.watchLag(runCtx) }() // needs NATS only: runs during an outage too
		if ready || m.prepareWithRetry(runCtx) {
			wg.Add(1)
			go func() { defer wg.Done(); m.retain(runCtx) }()
			m.run(runCtx)
		}
		stop() // the loop may end by itself (a test crash): stop the helpers too
		wg.Wait()
	}()
	m.stopFn, m.done = stop, done
	m.log.Info().Int("batch", m.cfg.Batch).Msg("mirror started")
	return nil
}

func (m *Mirror) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       subject.ConsumerMirror,
		Description:   "AX audit mirror into MySQL",
		FilterSubject: subject.TaskAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       m.cfg.AckWait,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: max(4*m.cfg.Batch, 1000),
		MaxWaiting:    512,
	}
}

// prepareWithRetry repeats the start-up checks until they pass or ctx ends.
func (m *Mirror) prepareWithRetry(ctx context.Context) bool {
	bo := m.backoff()
	for {
		pctx, cancel := context.WithTimeout(ctx, m.cfg.ConnectTimeout)
		version, err := prepare(pctx, m.db, m.dsn)
		cancel()
		if err == nil {
			m.setUp()
			m.log.Info().Int("schema_version", version).Msg("audit database ready")
			return true
		}
		m.setDown(err)
		ev := m.log.Warn()
		if !transient(err) {
			ev = m.log.Error() // needs an operator, but keep trying: it may get fixed
		}
		delay := bo.NextBackOff()
		ev.Err(err).Dur("retry_in", delay).Msg("audit database not ready")
		if !sleep(ctx, delay) {
			return false
		}
	}
}

// Stop stops fetching, lets the batch in hand finish (or, if MySQL is down,
// leaves it unacknowledged for redelivery) and returns when done or when ctx
// ends. It closes the database if the mirror opened it.
func (m *Mirror) Stop(ctx context.Context) error {
	m.life.Lock()
	stop, done, already := m.stopFn, m.done, m.stopped
	m.stopped = true
	m.life.Unlock()
	if already {
		return nil
	}
	if stop != nil {
		stop()
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("mirror: stop: %w", ctx.Err())
		}
		m.log.Info().Msg("mirror stopped")
	}
	if m.ownsDB {
		if err := m.db.Close(); err != nil {
			return fmt.Errorf("mirror: close database: %w", err)
		}
	}
	return nil
}

func (m *Mirror) setDown(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stats.downSince.IsZero() {
		m.stats.downSince = m.cfg.Now()
	}
	m.stats.lastError = err.Error()
}

func (m *Mirror) setUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.downSince = time.Time{}
	m.stats.lastError = ""
}

func (m *Mirror) backoff() *backoffState {
	return newBackoff(m.cfg.RetryMin, m.cfg.RetryMax)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
