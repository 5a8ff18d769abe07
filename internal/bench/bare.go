package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BareWorkers is how many workers the bare JetStream loop runs, as in the
// side-by-side runs of AX, Asynq and River (../shared/notes).
const BareWorkers = 50

// bareBatch is how many jobs a bare worker fetches at once.
const bareBatch = 100

// Bare is the bare JetStream loop's figure on the bench's own server.
type Bare struct {
	Jobs       int           `json:"jobs"`
	Workers    int           `json:"workers"`
	Elapsed    time.Duration `json:"elapsed"`
	JobsPerSec float64       `json:"jobs_per_sec"`
	// ServerTraffic is the embedded server's traffic per job (nil with an
	// external server or a cluster).
	ServerTraffic *TrafficPer `json:"server_traffic_per_job,omitempty"`
}

// bare measures what JetStream alone does on the same server, in the same
// storage mode, as the ceiling AX's figures are read against: n jobs of
// 200 bytes are published to a work queue, then BareWorkers workers each
// fetch up to bareBatch jobs, publish their results (pipelined, waiting for
// every acknowledgement) and acknowledge the jobs. Jobs/s is from the first publish to the last ack.
// Its streams are removed afterwards.
func bare(ctx context.Context, conn jetstream.JetStream, n int, replicas int) (Bare, error) {
	// Room for every worker's batch in flight at once.
	js, err := jetstream.New(conn.Conn(), jetstream.WithPublishAsyncMaxPending(2*BareWorkers*bareBatch))
	if err != nil {
		return Bare{}, fmt.Errorf("bare JetStream: %w", err)
	}
	const in, out = "AX_BENCH_BARE_IN", "AX_BENCH_BARE_OUT"
	for _, cfg := range []jetstream.StreamConfig{
		{Name: in, Subjects: []string{"ax-bench.bare.in"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas},
		{Name: out, Subjects: []string{"ax-bench.bare.out"}, Storage: jetstream.FileStorage, Replicas: replicas},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return Bare{}, fmt.Errorf("bare JetStream: %w", err)
		}
		defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), cfg.Name) }()
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, in, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: -1, AckWait: time.Minute})
	if err != nil {
		return Bare{}, fmt.Errorf("bare JetStream: %w", err)
	}
	job := make([]byte, 200)
	begin := time.Now()
	var pending []jetstream.PubAckFuture
	for i := range n {
		f, err := js.PublishAsync("ax-bench.bare.in", job)
		if err != nil {
			return Bare{}, fmt.Errorf("bare JetStream: publish job %d: %w", i, err)
		}
		pending = append(pending, f)
		if len(pending)%1000 == 0 {
			// Stay below nats.go's limit of outstanding async publishes.
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return Bare{}, ctx.Err()
			}
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, BareWorkers)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range BareWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil && done.Load() < int64(n) {
				batch, err := cons.Fetch(bareBatch, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					errs <- err
					return
				}
				var msgs []jetstream.Msg
				var acks []jetstream.PubAckFuture
				for msg := range batch.Messages() {
					f, err := js.PublishAsync("ax-bench.bare.out", msg.Data())
					if err != nil {
						errs <- err
						return
					}
					msgs, acks = append(msgs, msg), append(acks, f)
				}
				for i, f := range acks {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						errs <- err
						return
					}
					if err := msgs[i].Ack(); err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return Bare{}, fmt.Errorf("bare JetStream: %w", err)
	}
	for _, f := range pending {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return Bare{}, fmt.Errorf("bare JetStream: publish: %w", err)
		}
	}
	elapsed := time.Since(begin)
	return Bare{Jobs: n, Workers: BareWorkers, Elapsed: elapsed, JobsPerSec: float64(n) / elapsed.Seconds()}, nil
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			out = append(out, err)
		}
	}
	return out
}
