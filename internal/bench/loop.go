package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
)

// loopBatch is how many creation records the minimal loop's producer puts
// in one atomic batch, and loopInFlight how many batches it has in flight.
const (
	loopBatch    = 100
	loopInFlight = 8
)

// Loop is the minimal durable job loop's figure on the bench's own server.
type Loop struct {
	Jobs       int           `json:"jobs"`
	Workers    int           `json:"workers"`
	Elapsed    time.Duration `json:"elapsed"`
	JobsPerSec float64       `json:"jobs_per_sec"`
	// Batches is how many atomic batches were committed (creation and
	// final records together).
	Batches int `json:"batches"`
	// Stored is how many messages the loop's stream held at the end: a
	// creation and a final record per job.
	Stored uint64 `json:"stored"`
	// Fenced says that a second final record of a job — a zombie's,
	// expecting the creation's sequence — was refused.
	Fenced bool `json:"fenced"`
}

// durableLoop measures the smallest durable, fenced job loop JetStream
// allows, with no orchestrator — the design AX's protocol is read against
// (../shared/notes/jetstream-ceilings.md). One stream (atomic publishes
// allowed) and one pull consumer on the creation records:
//
//  1. the producer stores each job's creation record, ax-bench.loop.<i>.c,
//     with an expected last sequence of 0 on ax-bench.loop.<i>.* (the
//     idempotent submission, its compare-and-set creation and its dispatch
//     in one message), loopBatch records per atomic batch, loopInFlight
//     batches in flight;
//  2. the executor fetches up to workers jobs, runs them (no-op), and
//     stores their final records, ax-bench.loop.<i>.f, each expecting its
//     creation's sequence on ax-bench.loop.<i>.* (the fence a zombie's
//     final write would fail), as one atomic batch;
//  3. then acknowledges the fetch with one AckAll, and fetches again: at
//     most workers jobs are in hand, as with that many workers.
//
// Jobs/s is from the first creation record to the last final record. Its
// stream is removed afterwards. Crash paths are not exercised: the loop
// holds them by design only.
func durableLoop(ctx context.Context, conn jetstream.JetStream, n, workers, replicas int) (Loop, error) {
	nc := conn.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	const stream, prefix = "AX_BENCH_LOOP", "ax-bench.loop."
	cfg := jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ">"}, Storage: jetstream.FileStorage,
		Replicas: replicas, AllowAtomicPublish: true}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), stream) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "executors", FilterSubject: prefix + "*.c",
		AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1, AckWait: time.Minute})
	if err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	job := make([]byte, 200)
	record := func(id, kind string, expect uint64) *nats.Msg {
		m := nats.NewMsg(prefix + id + "." + kind)
		m.Data = job
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", prefix+id+".*")
		return m
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var batches sync.WaitGroup
	var mu sync.Mutex
	count := 0
	begin := time.Now()
	batches.Go(func() {
		slots := make(chan struct{}, loopInFlight)
		var inFlight sync.WaitGroup
		for start := 0; start < n && ctx.Err() == nil; start += loopBatch {
			msgs := make([]*nats.Msg, 0, loopBatch)
			for i := start; i < min(start+loopBatch, n); i++ {
				msgs = append(msgs, record(strconv.Itoa(i), "c", 0))
			}
			slots <- struct{}{}
			inFlight.Go(func() {
				defer func() { <-slots }()
				if _, err := groupcommit.PublishBatch(ctx, nc, msgs); err != nil {
					cancel(fmt.Errorf("creation records: %w", err))
					return
				}
				mu.Lock()
				count++
				mu.Unlock()
			})
		}
		inFlight.Wait()
	})
	done := 0
	for done < n {
		if err := context.Cause(ctx); err != nil {
			return Loop{}, fmt.Errorf("durable loop: %w", err)
		}
		batch, err := cons.Fetch(workers, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return Loop{}, fmt.Errorf("durable loop: fetch: %w", err)
		}
		var last jetstream.Msg
		var finals []*nats.Msg
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return Loop{}, fmt.Errorf("durable loop: %w", err)
			}
			id := msg.Subject()[len(prefix) : len(msg.Subject())-len(".c")]
			finals = append(finals, record(id, "f", md.Sequence.Stream))
			last = msg
		}
		if last == nil {
			continue
		}
		if _, err := groupcommit.PublishBatch(ctx, nc, finals); err != nil {
			return Loop{}, fmt.Errorf("durable loop: final records: %w", err)
		}
		if err := last.Ack(); err != nil {
			return Loop{}, fmt.Errorf("durable loop: ack: %w", err)
		}
		mu.Lock()
		count++
		mu.Unlock()
		done += len(finals)
	}
	elapsed := time.Since(begin)
	batches.Wait()
	res := Loop{Jobs: n, Workers: workers, Elapsed: elapsed, JobsPerSec: float64(n) / elapsed.Seconds(), Batches: count}
	// A zombie's final record for job 0, expecting its creation's sequence
	// (the first of the stream), is refused.
	_, err = js.PublishMsg(ctx, record("0", "f", 1))
	res.Fenced = err != nil
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	res.Stored = info.State.Msgs
	return res, nil
}
