package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/orchestrator"
)

// stack is one or more orchestrators and an executor running in this
// process against a server, plus the connections a bench opens; close stops
// and closes all.
type stack struct {
	url  string
	opts []nats.Option
	// orchs are the orchestrators, each on its own connection, sharing the
	// streams and consumers as separate `ax orchestrator` processes would;
	// counts holds each one's counters.
	orchs  []*orchestrator.Orchestrator
	counts []*counters
	// names are their node ids, and orchConns their connections.
	names     []string
	orchConns []*nats.Conn
	// servers is how many server URLs the orchestrators were spread over.
	servers int
	ex      *executor.Executor
	conns   []*nats.Conn
}

// stackConfig configures startStack.
type stackConfig struct {
	url      string
	opts     []nats.Option
	topo     orchestrator.TopologyOptions
	capacity float64
	// orchestrators to start (at least one).
	orchestrators int
	log           zerolog.Logger
	// register installs the executor's handlers.
	register func(*executor.Executor)
	// orch, when set, adjusts each orchestrator's configuration (key
	// limits, fairness window…) before it is created.
	orch func(*orchestrator.Config)
}

// startStack starts sc.orchestrators orchestrators and an executor.
// Orchestrator i is named bench-orchestrator-<i+1> and, when the URL lists
// several servers (a cluster), connects to the i-th first (round robin), so
// the orchestrators are spread over the servers.
func startStack(ctx context.Context, sc stackConfig) (*stack, error) {
	st := &stack{url: sc.url, opts: sc.opts}
	slogger := slog.New(zerolog.NewSlogHandler(sc.log))
	urls := strings.Split(sc.url, ",")
	st.servers = min(len(urls), max(sc.orchestrators, 1))
	for i := range max(sc.orchestrators, 1) {
		onc, err := st.connectTo(spread(urls, i), len(urls) > 1)
		if err != nil {
			st.close()
			return nil, err
		}
		c := newCounters()
		ocfg := orchestrator.Config{
			NodeID: fmt.Sprintf("bench-orchestrator-%d", i+1), Logger: slogger, Topology: sc.topo,
			// Metrics only for the counters; JetStream is sampled once, at start.
			Metrics: c, SampleInterval: 24 * time.Hour,
		}
		if sc.orch != nil {
			sc.orch(&ocfg)
		}
		o, err := orchestrator.New(onc, ocfg)
		if err == nil {
			st.orchs, st.counts = append(st.orchs, o), append(st.counts, c)
			st.names, st.orchConns = append(st.names, ocfg.NodeID), append(st.orchConns, onc)
			err = o.Start(ctx)
		}
		if err != nil {
			st.close()
			return nil, err
		}
	}
	enc, err := st.connect()
	var ex *executor.Executor
	if err == nil {
		ex, err = executor.New(enc, executor.Config{ID: "bench-executor", Capacity: sc.capacity, Logger: slogger})
	}
	if err == nil {
		st.ex = ex
		sc.register(ex)
		err = ex.Start(ctx)
	}
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

// spread returns the server URLs with the i-th (modulo their number) first.
func spread(urls []string, i int) string {
	k := i % len(urls)
	return strings.Join(append(append([]string{}, urls[k:]...), urls[:k]...), ",")
}

// connect opens a connection that close closes.
func (s *stack) connect() (*nats.Conn, error) {
	return s.connectTo(s.url, false)
}

// connectTo opens a connection to url that close closes; inOrder tries
// url's servers in their order instead of a random one first.
func (s *stack) connectTo(url string, inOrder bool) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.MaxReconnects(-1)}, s.opts...)
	if inOrder {
		opts = append(opts, nats.DontRandomize())
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, nc)
	return nc, nil
}

// kill kills orchestrator i as the server sees a kill -9: its connection
// closes at once, with whatever it held unacknowledged and unanswered, and
// its subscriptions (direct requests, claims) go with it. It is then
// stopped, to end its goroutines; on a closed connection that does
// nothing the server sees.
func (s *stack) kill(i int) {
	s.orchConns[i].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.orchs[i].Stop(ctx)
}

func (s *stack) close() {
	if s.ex != nil {
		_ = s.ex.Stop(context.Background())
	}
	var wg sync.WaitGroup
	for _, o := range s.orchs {
		wg.Go(func() { _ = o.Stop(context.Background()) })
	}
	wg.Wait()
	for _, nc := range s.conns {
		nc.Close()
	}
}

// counters is an orchestrator's Metrics as far as the bench reads them:
// the task records it wrote and the messages its consumers got again.
type counters struct {
	orchestrator.NopMetrics
	writes      atomic.Uint64
	batched     atomic.Uint64 // record writes committed in atomic batches
	batches     atomic.Uint64
	mu          sync.Mutex
	redelivered map[string]uint64
	// fairQueued is the ready tasks last queued for fairness.
	fairQueued atomic.Int64
}

// FairQueued keeps the tasks queued for fairness.
func (c *counters) FairQueued(n int) { c.fairQueued.Store(int64(n)) }

func newCounters() *counters { return &counters{redelivered: map[string]uint64{}} }

// TransitionWritten counts a record written.
func (c *counters) TransitionWritten(orchestrator.Transition) { c.writes.Add(1) }

// RecordsCommitted counts the record writes committed in batches.
func (c *counters) RecordsCommitted(n int, how string) {
	if how == "batch" {
		c.batched.Add(uint64(n))
		c.batches.Add(1)
	}
}

// MessageRedelivered counts a message delivered again.
func (c *counters) MessageRedelivered(consumer string) {
	c.mu.Lock()
	c.redelivered[consumer]++
	c.mu.Unlock()
}

// Work is what the orchestrators did during a phase, from their counters.
type Work struct {
	// ReadsPerTask is the task records read per task by all orchestrators.
	// A report is applied without a read by the orchestrator that
	// dispatched its task (its dispatch cache); handled by another, it
	// costs one read; a write that lost a compare-and-set costs one more.
	ReadsPerTask float64 `json:"reads_per_task"`
	// WritesPerTask is the task records written per task (successful
	// compare-and-sets).
	WritesPerTask float64 `json:"writes_per_task"`
	// WriteShare is each orchestrator's share of those writes.
	WriteShare []float64 `json:"write_share"`
	// BatchedShare is the share of record writes committed in atomic
	// batches (group commit), and AverageBatch their average batch.
	BatchedShare float64 `json:"batched_share,omitempty"`
	AverageBatch float64 `json:"average_batch,omitempty"`
	// Redelivered counts the messages delivered again, by consumer (a
	// handler failed or its orchestrator did not acknowledge in time).
	Redelivered map[string]uint64 `json:"redelivered,omitempty"`
}

// workMark is every orchestrator's counters at one time.
type workMark struct {
	reads, writes    []uint64
	batched, batches uint64
	redelivered      map[string]uint64
}

func (s *stack) mark() workMark {
	m := workMark{redelivered: map[string]uint64{}}
	for i, o := range s.orchs {
		m.reads = append(m.reads, o.StoreReads())
		m.writes = append(m.writes, s.counts[i].writes.Load())
		c := s.counts[i]
		m.batched += c.batched.Load()
		m.batches += c.batches.Load()
		c.mu.Lock()
		for consumer, n := range c.redelivered {
			m.redelivered[consumer] += n
		}
		c.mu.Unlock()
	}
	return m
}

// work returns what the orchestrators did for tasks tasks since before.
// A write is counted once its compare-and-set returned, which may be after
// the bench saw the task succeed: it first waits, for at most a second,
// until the count has not moved for 100 ms.
func (s *stack) work(ctx context.Context, before workMark, tasks int) Work {
	s.settle(ctx)
	after := s.mark()
	w := Work{WriteShare: make([]float64, len(s.orchs))}
	var reads, writes uint64
	for i := range s.orchs {
		reads += after.reads[i] - before.reads[i]
		writes += after.writes[i] - before.writes[i]
	}
	for i := range s.orchs {
		if writes > 0 {
			w.WriteShare[i] = float64(after.writes[i]-before.writes[i]) / float64(writes)
		}
	}
	if tasks > 0 {
		w.ReadsPerTask = float64(reads) / float64(tasks)
		w.WritesPerTask = float64(writes) / float64(tasks)
	}
	if batches := after.batches - before.batches; batches > 0 && writes > 0 {
		batched := after.batched - before.batched
		w.BatchedShare = float64(batched) / float64(writes)
		w.AverageBatch = float64(batched) / float64(batches)
	}
	for consumer, n := range after.redelivered {
		if d := n - before.redelivered[consumer]; d > 0 {
			if w.Redelivered == nil {
				w.Redelivered = map[string]uint64{}
			}
			w.Redelivered[consumer] = d
		}
	}
	return w
}

// settle waits until the orchestrators' write count has not moved for
// 100 ms, for at most a second or until ctx ends.
func (s *stack) settle(ctx context.Context) {
	total := func() (n uint64) {
		for _, c := range s.counts {
			n += c.writes.Load()
		}
		return n
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := total()
	for range 10 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n := total()
		if n == last {
			return
		}
		last = n
	}
}
