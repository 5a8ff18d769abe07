// Package axtest runs a whole AX in your test process: an embedded NATS
// server with JetStream (random port, temporary store), an orchestrator,
// an executor and a client, in one call. Register your handlers on the
// executor, run tasks to their end and assert how they ended: the real
// engine, retries, snoozes, graphs and all, with no mocks and nothing to
// install.
//
//	func TestSendEmail(t *testing.T) {
//		env := axtest.Start(t, nil)
//		executor.HandleArgs(env.Executor, sendEmail)
//		got := env.RunTask(t, "email.send", Email{To: "a@example.com"})
//		axtest.RequireSucceeded(t, got)
//	}
//
// Start ties the environment to a test (it is closed when the test ends);
// New and Close manage one by hand, for examples or a TestMain that shares
// one environment among a package's tests (task ids must then differ
// between tests; the default ids do).
//
// Defaults suit tests: failed attempts are retried after 10–100 ms instead
// of 1 s doubling to 10 minutes, and waits give up after a minute.
package axtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Defaults for Options.
const (
	// DefaultTimeout is Options.Timeout's default.
	DefaultTimeout = time.Minute
	// DefaultRetryBase and DefaultRetryMax are the backoff of failed
	// attempts in the test orchestrator unless Options.Orchestrator sets
	// one: the first retry after 10 ms, doubling, at most 100 ms.
	DefaultRetryBase = 10 * time.Millisecond
	DefaultRetryMax  = 100 * time.Millisecond
)

// Options configures an Env. A nil *Options, and every zero field, means
// the defaults.
type Options struct {
	// Executor configures the environment's executor (its Logger defaults
	// to Logger).
	Executor executor.Config
	// Orchestrator configures the environment's orchestrator. Its retry
	// backoff defaults to DefaultRetryBase…DefaultRetryMax.
	Orchestrator orchestrator.Config
	// Timeout bounds each wait of RunTask and WaitTask. Default
	// DefaultTimeout.
	Timeout time.Duration
	// Codec encodes the payloads Client submits and decodes them in the
	// executors (their Config.Codec, unless set): payload encryption
	// end to end (see package codec). Default nil: none.
	Codec codec.Codec
	// Logger receives the executor's logs. Default: none.
	Logger *slog.Logger
}

// Env is an AX running in the test process. Its fields are ready to use;
// register handlers on Executor before submitting their tasks (a task
// whose type has no handler fails).
type Env struct {
	// URL is the embedded NATS server's client URL.
	URL string
	// Client submits and reads tasks.
	Client *sdk.Client
	// Executor runs handlers; it is started.
	Executor *executor.Executor
	// Orchestrator owns the tasks' state; it is started.
	Orchestrator *orchestrator.Orchestrator

	timeout time.Duration
	logger  *slog.Logger
	codec   codec.Codec
	dir     string
	srv     *natsserver.Server

	mu        sync.Mutex
	conns     []*nats.Conn
	executors []*executor.Executor
	closed    bool
}

// New starts an embedded NATS server in a new temporary directory, an
// orchestrator, an executor and a client. Close stops them and removes the
// directory. Tests usually call Start instead.
func New(ctx context.Context, opts *Options) (*Env, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Executor.Logger == nil {
		o.Executor.Logger = o.Logger
	}
	if o.Orchestrator.Retry.Base <= 0 {
		o.Orchestrator.Retry.Base = DefaultRetryBase
	}
	if o.Orchestrator.Retry.Max <= 0 {
		o.Orchestrator.Retry.Max = DefaultRetryMax
	}
	dir, err := os.MkdirTemp("", "axtest-")
	if err != nil {
		return nil, fmt.Errorf("axtest: temp dir: %w", err)
	}
	env := &Env{timeout: o.Timeout, logger: o.Logger, codec: o.Codec, dir: dir}
	if err := env.start(ctx, o); err != nil {
		_ = env.Close(context.Background())
		return nil, err
	}
	return env, nil
}

func (e *Env) start(ctx context.Context, o Options) error {
	srv, err := natsserver.Start(natsserver.Config{StoreDir: e.dir})
	if err != nil {
		return fmt.Errorf("axtest: %w", err)
	}
	e.srv, e.URL = srv, srv.URL()
	onc, err := e.conn()
	if err != nil {
		return err
	}
	orch, err := orchestrator.New(onc, o.Orchestrator)
	if err != nil {
		return fmt.Errorf("axtest: new orchestrator: %w", err)
	}
	if err := orch.Start(ctx); err != nil {
		return fmt.Errorf("axtest: start orchestrator: %w", err)
	}
	e.Orchestrator = orch
	if e.Executor, err = e.NewExecutor(o.Executor); err != nil {
		return err
	}
	if err := e.Executor.Start(ctx); err != nil {
		return fmt.Errorf("axtest: start executor: %w", err)
	}
	cnc, err := e.conn()
	if err != nil {
		return err
	}
	if e.Client, err = sdk.New(ctx, cnc); err != nil {
		return fmt.Errorf("axtest: new client: %w", err)
	}
	e.Client.Codec = o.Codec
	return nil
}

// conn opens a connection to the embedded server, closed by Close.
func (e *Env) conn() (*nats.Conn, error) {
	nc, err := nats.Connect(e.URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("axtest: connect: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.conns = append(e.conns, nc)
	return nc, nil
}

// NewExecutor creates another executor on its own connection (not
// started; Close stops it): to test capabilities, capacity, or a shutdown
// while another executor stays up. Its Logger and Codec default to
// Options.Logger and Options.Codec.
func (e *Env) NewExecutor(cfg executor.Config) (*executor.Executor, error) {
	if cfg.Logger == nil {
		cfg.Logger = e.logger
	}
	if cfg.Codec == nil {
		cfg.Codec = e.codec
	}
	nc, err := e.conn()
	if err != nil {
		return nil, err
	}
	ex, err := executor.New(nc, cfg)
	if err != nil {
		return nil, fmt.Errorf("axtest: new executor: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.executors = append(e.executors, ex)
	return ex, nil
}

// Close stops the executors, the orchestrator and the server, and removes
// the server's store. ctx bounds the executors' drain. Calling it again
// does nothing.
func (e *Env) Close(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	executors, conns := e.executors, e.conns
	e.mu.Unlock()
	var errs []error
	for _, ex := range executors {
		if err := ex.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if e.Orchestrator != nil {
		if err := e.Orchestrator.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	if e.srv != nil {
		e.srv.Stop()
	}
	if err := os.RemoveAll(e.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run submits spec and waits until the task ends (succeeded, failed,
// cancelled or expired), at most ctx allows. It returns the task's final
// record; a refused submission is an *sdk.RejectedError.
func (e *Env) Run(ctx context.Context, spec task.Spec) (*task.Task, error) {
	id, err := e.Client.Submit(ctx, spec)
	if err != nil {
		return nil, err
	}
	return e.Client.Wait(ctx, id)
}
