// Package testenv starts the real parts AX's tests run against: an embedded
// NATS server with JetStream on a random port and a temporary store, and an
// orchestrator, executor and client connected to it.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/exectoken"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Logger returns a logger for tests: silent unless AX_TEST_LOG is set.
func Logger(t testing.TB) *zerolog.Logger {
	l := zerolog.Nop()
	if os.Getenv("AX_TEST_LOG") != "" {
		l = zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger()
	}
	return &l
}

// SlogLogger returns an slog logger for tests: silent unless AX_TEST_LOG is set.
func SlogLogger(t testing.TB) *slog.Logger {
	return slog.New(zerolog.NewSlogHandler(*Logger(t)))
}

// NATS starts an embedded server with its store in a temp dir and AX's
// topology created, as an orchestrator would (executors and clients only
// bind to it); it is shut down when the test ends. BareNATS has no topology.
func NATS(t testing.TB) *natsserver.Server {
	t.Helper()
	s := BareNATS(t)
	nc := Conn(t, s.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatalf("create AX's topology: %v", err)
	}
	nc.Close()
	return s
}

// BareNATS starts an embedded server with its store in a temp dir and
// nothing in it; it is shut down when the test ends.
func BareNATS(t testing.TB) *natsserver.Server {
	t.Helper()
	s, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Conn connects to url; the connection reconnects forever and is closed when
// the test ends.
func Conn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	name := t.Name()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// Attributed to its test (a shared log does not say which
			// test's connection dropped messages), with the subscription.
			if sub == nil {
				fmt.Fprintf(os.Stderr, "%s: nats: %v\n", name, err)
				return
			}
			msgs, bytes, _ := sub.Pending()
			limMsgs, limBytes, _ := sub.PendingLimits()
			fmt.Fprintf(os.Stderr, "%s: nats: %v on %q (type %v, pending %d msgs/%d bytes, limits %d/%d)\n",
				name, err, sub.Subject, sub.Type(), msgs, bytes, limMsgs, limBytes)
		}))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Orchestrator starts an orchestrator on its own connection to url.
func Orchestrator(t testing.TB, url string, cfg orchestrator.Config) *orchestrator.Orchestrator {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(zerolog.NewSlogHandler(*Logger(t)))
	}
	o, err := orchestrator.New(Conn(t, url), cfg)
	if err != nil {
		t.Fatalf("new orchestrator: %v", err)
	}
	if err := o.Start(context.Background()); err != nil {
		t.Fatalf("start orchestrator: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = o.Stop(ctx)
	})
	return o
}

// Executor creates an executor on its own connection to url; register
// handlers, then call Start (StartExecutor does both for tests that need none).
func Executor(t testing.TB, url string, cfg executor.Config) *executor.Executor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = SlogLogger(t)
	}
	e, err := executor.New(Conn(t, url), cfg)
	if err != nil {
		t.Fatalf("new executor: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e
}

// Start starts e or fails the test.
func Start(t testing.TB, e *executor.Executor) {
	t.Helper()
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("start executor: %v", err)
	}
}

// Stack starts what most tests need: a server, an orchestrator (ocfg), an
// executor (ecfg) whose "ok" handler succeeds at once, started, and a
// client. Register more handlers on the executor as the test needs them.
func Stack(t testing.TB, ocfg orchestrator.Config, ecfg executor.Config) (*natsserver.Server, *executor.Executor, *sdk.Client) {
	t.Helper()
	srv := NATS(t)
	Orchestrator(t, srv.URL(), ocfg)
	ex := Executor(t, srv.URL(), ecfg)
	ex.HandleFunc("ok", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	Start(t, ex)
	return srv, ex, Client(t, srv.URL())
}

// Client returns an SDK client on its own connection to url.
func Client(t testing.TB, url string) *sdk.Client {
	t.Helper()
	c, err := sdk.New(context.Background(), Conn(t, url))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	return c
}

// Context returns a context that ends after d or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 20ms until it returns true or d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what)
}

// Events reads every event in the task histories, in stream order.
func Events(t testing.TB, nc *nats.Conn) []store.Revisioned {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, done, err := scan.Open(ctx, js, subject.StreamTasks, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	var out []store.Revisioned
	for len(out) < int(info.State.Msgs) {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, _ := msg.Metadata()
			var ev task.Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				t.Fatalf("event %d: %v", md.Sequence.Stream, err)
			}
			out = append(out, store.Revisioned{Revision: md.Sequence.Stream, Event: ev})
		}
		if n == 0 {
			t.Fatalf("read %d of %d events", len(out), info.State.Msgs)
		}
	}
	return out
}

// Token returns the execution token of a task's execution, as the
// orchestrator signs it into the dispatch (with the cluster's key, which
// the first orchestrator stored): for tests that report, claim or lease
// by hand as the executor that was dispatched.
func Token(t testing.TB, nc *nats.Conn, id, executionID string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	k, err := exectoken.Load(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	return k.Sign(id, executionID)
}
