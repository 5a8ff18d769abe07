package bench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// ProducerConfig configures `ax bench producer`.
type ProducerConfig struct {
	// URL of a NATS server; empty starts an embedded one in a temp dir.
	URL string
	// NATSOptions authenticate to the server at URL (see internal/natsconn).
	NATSOptions []nats.Option
	// Tasks submitted through a Submitter in the throughput phase. Default 100,000.
	Tasks int
	// Calls timed one by one for the Submit latency figures. Default 100,000.
	Calls int
	// Submitter's configuration (zero: the defaults).
	Submitter sdk.SubmitterConfig
	// MySQLDSN, when set, also measures the outbox relay: OutboxRows rows
	// are enqueued into ax_outbox (created in that database; the rows are
	// deleted afterwards), then relayed by one relay.
	MySQLDSN   string
	OutboxRows int
	// SyncAlways runs the embedded server with fsync on every write.
	SyncAlways bool
	Logger     *zerolog.Logger
}

// ProducerResult are the producer side's figures.
type ProducerResult struct {
	// SubmitNs is the mean cost of one Submitter.Submit call (validate,
	// encode, buffer), with SubmitP50Ns/P99Ns/MaxNs from timing calls one
	// by one.
	SubmitNs    float64 `json:"submit_ns"`
	SubmitP50Ns int64   `json:"submit_p50_ns"`
	SubmitP99Ns int64   `json:"submit_p99_ns"`
	SubmitMaxNs int64   `json:"submit_max_ns"`
	// Tasks acknowledged by JetStream per second, from the first Submit to
	// Close returning (every task durable), with an orchestrator consuming
	// them in the same process.
	Tasks       int           `json:"tasks"`
	Elapsed     time.Duration `json:"elapsed"`
	TasksPerSec float64       `json:"tasks_per_sec"`
	// Outbox figures (with MySQLDSN): enqueue rate in transactions of 500
	// rows, and relay rate from start to the last row marked sent.
	OutboxRows        int     `json:"outbox_rows,omitempty"`
	EnqueueRowsPerSec float64 `json:"enqueue_rows_per_sec,omitempty"`
	RelayRowsPerSec   float64 `json:"relay_rows_per_sec,omitempty"`
}

// Producer measures the producer side: the Submitter's per-call cost and
// sustained rate into AX, and (with a DSN) the outbox relay's rate.
func Producer(ctx context.Context, cfg ProducerConfig) (ProducerResult, error) {
	var res ProducerResult
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	if cfg.Tasks <= 0 {
		cfg.Tasks = 100_000
	}
	if cfg.Calls <= 0 {
		cfg.Calls = 100_000
	}
	if cfg.OutboxRows <= 0 {
		cfg.OutboxRows = 20_000
	}
	url, stop, err := serverURL(cfg.URL, "ax-bench-producer-", cfg.SyncAlways, false)
	if err != nil {
		return res, err
	}
	defer stop()
	st, err := startStack(ctx, stackConfig{url: url, opts: cfg.NATSOptions, topo: orchestrator.TopologyOptions{Replicas: 1}, capacity: 512,
		orchestrators: 1, log: log, register: func(ex *executor.Executor) {
			ex.HandleFunc(TypeBench, func(context.Context, *executor.Job) (any, error) { return nil, nil })
		}})
	if err != nil {
		return res, err
	}
	defer st.close()
	nc, err := st.connect()
	if err != nil {
		return res, err
	}
	c, err := sdk.New(ctx, nc)
	if err != nil {
		return res, err
	}
	prefix := fmt.Sprintf("prod-%d-", time.Now().UnixNano())

	// Phase 1: the cost of a Submit call, each one timed (the buffer is
	// large enough that no call waits for room).
	lat := cfg.Submitter
	lat.MaxBuffered = max(lat.MaxBuffered, cfg.Calls)
	s, err := sdk.NewSubmitter(c, lat)
	if err != nil {
		return res, err
	}
	spec, _ := task.New(TypeBench, nil)
	durs := make([]int64, cfg.Calls)
	begin := time.Now()
	for i := range cfg.Calls {
		spec.ID = prefix + "l" + strconv.Itoa(i)
		t0 := time.Now()
		if _, err := s.Submit(ctx, spec); err != nil {
			return res, err
		}
		durs[i] = int64(time.Since(t0))
	}
	total := time.Since(begin)
	if err := s.Close(ctx); err != nil {
		return res, err
	}
	slices.Sort(durs)
	res.SubmitNs = float64(total.Nanoseconds()) / float64(cfg.Calls)
	res.SubmitP50Ns, res.SubmitP99Ns, res.SubmitMaxNs = durs[len(durs)/2], durs[len(durs)*99/100], durs[len(durs)-1]

	// Phase 2: sustained rate with the default bounded buffer (Submit
	// blocks when it is full, so this is the rate JetStream acknowledges).
	s, err = sdk.NewSubmitter(c, cfg.Submitter)
	if err != nil {
		return res, err
	}
	begin = time.Now()
	for i := range cfg.Tasks {
		spec.ID = prefix + "t" + strconv.Itoa(i)
		if _, err := s.Submit(ctx, spec); err != nil {
			return res, err
		}
	}
	if err := s.Close(ctx); err != nil {
		return res, err
	}
	res.Tasks, res.Elapsed = cfg.Tasks, time.Since(begin)
	res.TasksPerSec = float64(cfg.Tasks) / res.Elapsed.Seconds()

	if cfg.MySQLDSN != "" {
		rnc, err := st.connect()
		if err != nil {
			return res, err
		}
		if err := benchOutbox(ctx, cfg, rnc, prefix, &res, log); err != nil {
			return res, err
		}
	}
	return res, nil
}

// benchOutbox enqueues rows in transactions of 500, then relays them.
func benchOutbox(ctx context.Context, cfg ProducerConfig, nc *nats.Conn, prefix string, res *ProducerResult, log zerolog.Logger) error {
	db, err := mirror.Open(cfg.MySQLDSN, &log)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := outbox.Migrate(ctx, db); err != nil {
		return mirror.Explain(err, cfg.MySQLDSN)
	}
	if b, err := outbox.ReadBacklog(ctx, db); err != nil {
		return err
	} else if b.Pending > 0 {
		return fmt.Errorf("bench outbox: %d rows already pending in ax_outbox; use an empty database", b.Pending)
	}
	n := cfg.OutboxRows
	specs := make([]task.Spec, 0, 500)
	begin := time.Now()
	for done := 0; done < n; {
		specs = specs[:0]
		for i := 0; i < 500 && done+i < n; i++ {
			s, _ := task.New(TypeBench, nil)
			s.ID = prefix + "o" + strconv.Itoa(done+i)
			specs = append(specs, s)
		}
		if err := enqueueTx(ctx, db, specs); err != nil {
			return err
		}
		done += len(specs)
	}
	res.OutboxRows = n
	res.EnqueueRowsPerSec = float64(n) / time.Since(begin).Seconds()

	relay, err := outbox.NewRelay(db, nc, outbox.Config{Logger: slog.New(zerolog.NewSlogHandler(log))})
	if err != nil {
		return err
	}
	begin = time.Now()
	if err := relay.Start(ctx); err != nil {
		return err
	}
	defer relay.Stop(context.Background())
	for relay.Stats().Rows < uint64(n) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench outbox: %d of %d rows relayed: %w", relay.Stats().Rows, n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	res.RelayRowsPerSec = float64(n) / time.Since(begin).Seconds()
	_, err = db.ExecContext(ctx, "DELETE FROM "+outbox.Table+" WHERE task_id LIKE ?", prefix+"%")
	return err
}

func enqueueTx(ctx context.Context, db *sql.DB, specs []task.Spec) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := outbox.EnqueueMany(ctx, tx, specs); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
