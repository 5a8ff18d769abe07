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
	Jobs    int `json:"jobs"`
	Workers int `json:"workers"`
	// Streams is how many streams the jobs were split over (by id), each
	// with its own producer and executor loop and Workers/Streams jobs in
	// hand: a partitioned store.
	Streams    int           `json:"streams"`
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
// allowed) and one pull consumer on the creation records — or, with
// streams > 1, the jobs split over that many such streams, each run as
// below with its share of the jobs in hand (a partitioned store: each
// stream has its own store, syncs and batch staging on the server):
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
// streams are removed afterwards. Crash paths are not exercised: the loop
// holds them by design only.
func durableLoop(ctx context.Context, conn jetstream.JetStream, n, workers, streams, replicas int) (Loop, error) {
	streams = max(1, min(streams, workers, n))
	parts := make([]loopPart, streams)
	for k := range parts {
		parts[k] = loopPart{stream: "AX_BENCH_LOOP" + strconv.Itoa(k), prefix: "ax-bench.loop" + strconv.Itoa(k) + ".",
			jobs: n / streams, workers: workers / streams}
		if k < n%streams {
			parts[k].jobs++
		}
		if k < workers%streams {
			parts[k].workers++
		}
	}
	nc := conn.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	for k := range parts {
		if err := parts[k].create(ctx, js, replicas); err != nil {
			return Loop{}, err
		}
		defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), parts[k].stream) }()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	begin := time.Now()
	for k := range parts {
		wg.Go(func() {
			if err := parts[k].run(ctx, nc); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if err := context.Cause(ctx); err != nil {
		return Loop{}, fmt.Errorf("durable loop: %w", err)
	}
	res := Loop{Jobs: n, Workers: workers, Streams: streams, Elapsed: elapsed, JobsPerSec: float64(n) / elapsed.Seconds()}
	// A zombie's final record for job 0, expecting its creation's sequence
	// (the first of its stream), is refused.
	_, err = js.PublishMsg(ctx, parts[0].record("0", "f", 1))
	res.Fenced = err != nil
	for _, p := range parts {
		res.Batches += p.batches
		st, err := js.Stream(ctx, p.stream)
		if err != nil {
			return Loop{}, fmt.Errorf("durable loop: %w", err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			return Loop{}, fmt.Errorf("durable loop: %w", err)
		}
		res.Stored += info.State.Msgs
	}
	return res, nil
}

// loopPart is one stream of the durable loop, with its share of the jobs
// and of the jobs in hand.
type loopPart struct {
	stream, prefix string
	jobs, workers  int
	cons           jetstream.Consumer
	batches        int // committed, creation and final records together
}

func (p *loopPart) create(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := jetstream.StreamConfig{Name: p.stream, Subjects: []string{p.prefix + ">"}, Storage: jetstream.FileStorage,
		Replicas: replicas, AllowAtomicPublish: true}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("durable loop: %w", err)
	}
	var err error
	p.cons, err = js.CreateOrUpdateConsumer(ctx, p.stream, jetstream.ConsumerConfig{Durable: "executors", FilterSubject: p.prefix + "*.c",
		AckPolicy: jetstream.AckAllPolicy, MaxAckPending: -1, AckWait: time.Minute})
	if err != nil {
		return fmt.Errorf("durable loop: %w", err)
	}
	return nil
}

var loopJob = make([]byte, 200)

// record is job id's creation ("c") or final ("f") record, expecting the
// job's subjects to be at sequence expect.
func (p *loopPart) record(id, kind string, expect uint64) *nats.Msg {
	m := nats.NewMsg(p.prefix + id + "." + kind)
	m.Data = loopJob
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", p.prefix+id+".*")
	return m
}

// run is one stream's producer and executor loop.
func (p *loopPart) run(ctx context.Context, nc *nats.Conn) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var batches sync.WaitGroup
	var mu sync.Mutex
	n := p.jobs
	batches.Go(func() {
		slots := make(chan struct{}, loopInFlight)
		var inFlight sync.WaitGroup
		for start := 0; start < n && ctx.Err() == nil; start += loopBatch {
			msgs := make([]*nats.Msg, 0, loopBatch)
			for i := start; i < min(start+loopBatch, n); i++ {
				msgs = append(msgs, p.record(strconv.Itoa(i), "c", 0))
			}
			slots <- struct{}{}
			inFlight.Go(func() {
				defer func() { <-slots }()
				if _, err := groupcommit.PublishBatch(ctx, nc, msgs); err != nil {
					cancel(fmt.Errorf("creation records: %w", err))
					return
				}
				mu.Lock()
				p.batches++
				mu.Unlock()
			})
		}
		inFlight.Wait()
	})
	defer batches.Wait()
	done := 0
	for done < n {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		batch, err := p.cons.Fetch(p.workers, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		var last jetstream.Msg
		var finals []*nats.Msg
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			id := msg.Subject()[len(p.prefix) : len(msg.Subject())-len(".c")]
			finals = append(finals, p.record(id, "f", md.Sequence.Stream))
			last = msg
		}
		if last == nil {
			continue
		}
		if _, err := groupcommit.PublishBatch(ctx, nc, finals); err != nil {
			return fmt.Errorf("final records: %w", err)
		}
		if err := last.Ack(); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
		mu.Lock()
		p.batches++
		mu.Unlock()
		done += len(finals)
	}
	return nil
}
