package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/mirror"
)

// mirrorWatch runs the audit mirror during a bench and samples its lag.
type mirrorWatch struct {
	m      *mirror.Mirror
	begin  time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	maxLag     time.Duration
	maxPending uint64
}

func startMirror(ctx context.Context, nc *nats.Conn, dsn string, log zerolog.Logger) (*mirrorWatch, error) {
	m, err := mirror.NewFromDSN(nc, dsn, mirror.Config{Logger: &log})
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		_ = m.Stop(context.Background())
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	w := &mirrorWatch{m: m, begin: time.Now(), cancel: cancel, done: make(chan struct{})}
	go w.sample(sctx)
	return w, nil
}

func (w *mirrorWatch) sample(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lag, err := w.m.Lag(ctx)
		if err != nil {
			continue
		}
		w.mu.Lock()
		w.maxLag = max(w.maxLag, lag.Age)
		w.maxPending = max(w.maxPending, lag.Pending+uint64(lag.InFlight))
		w.mu.Unlock()
	}
}

// finish waits until the mirror caught up and returns its figures.
func (w *mirrorWatch) finish(ctx context.Context) (MirrorStats, error) {
	for {
		lag, err := w.m.Lag(ctx)
		if err == nil && lag.Pending == 0 && lag.InFlight == 0 {
			w.cancel()
			<-w.done
			elapsed := time.Since(w.begin)
			w.mu.Lock()
			defer w.mu.Unlock()
			return MirrorStats{Events: lag.Written, Elapsed: elapsed, EventsPerSec: float64(lag.Written) / elapsed.Seconds(),
				MaxLag: w.maxLag, MaxPending: w.maxPending}, nil
		}
		select {
		case <-ctx.Done():
			return MirrorStats{}, fmt.Errorf("mirror did not catch up: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *mirrorWatch) stop() {
	w.cancel()
	_ = w.m.Stop(context.Background())
}
