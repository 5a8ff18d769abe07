//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/store"
)

// TestClusterFloor measures what JetStream itself allows under
// TestCluster's faults: the smallest durable, fenced job loop, with no
// orchestrator, on the same 3-node R3 cluster, under the same fault
// schedule (partitions, node kill -9 and SIGSTOP, executors stopped; there
// is no orchestrator to kill). A job is a compare-and-set creation record
// (its submission and dispatch in one) and a compare-and-set final record
// expecting the creation's sequence (the fence), written by one of three
// executors consuming the creation records (ack wait 6 s, as AX's), each
// on its own node's connection. Every write is retried until stored or
// found stored; nothing else is done.
//
// Its figure is each job's time from its creation record to its final
// record, as the server stamped them: the longest is the platform's own
// stall under these faults, to read beside TestCluster's longest stall.
// That one is the longest time between two consecutive events of a task;
// here one span covers a dispatch, its run and its outcome, so it can only
// be longer than the same loop's per-step gaps. It checks the loop's fences (no job has two creation
// or two final records) and reports, without failing on them, what such a
// loop leaves behind under these faults, having no reconciler: jobs
// created and never delivered (stranded) and acknowledged creations the
// stream does not hold (lost), told apart by whether the write was
// answered or refused as already there.
//
// By default it runs 10 s of faults (a check of the loop, not a figure);
// AX_CLUSTER_LONG=1 runs TestCluster's 10 minutes (AX_CLUSTER_FAULT_SPAN
// overrides), at 40 jobs/s (TestCluster's long run submits ~37 tasks/s).
// AX_CLUSTER_SYNC_ALWAYS=1 as TestCluster.
func TestClusterFloor(t *testing.T) {
	span := 10 * time.Second
	if os.Getenv("AX_CLUSTER_LONG") == "1" {
		span = 10 * time.Minute
	}
	if e := os.Getenv("AX_CLUSTER_FAULT_SPAN"); e != "" {
		d, err := time.ParseDuration(e)
		if err != nil {
			t.Fatalf("AX_CLUSTER_FAULT_SPAN: %v", err)
		}
		span = d
	}
	const rate = 40 // jobs a second
	c := newCluster(t)
	rng := newRand(t)
	ncl := startNATSCluster(t, c, 3, os.Getenv("AX_CLUSTER_SYNC_ALWAYS") == "1")
	r := newClusterRig(t, c, ncl, rng)
	l := newFloorLoop(t, r.connectNodes())
	r.killExecutor = func() (string, func()) {
		i := r.rng.IntN(len(l.execs))
		l.stop(i)
		return "floor executor " + strconv.Itoa(i+1), func() { l.start(i) }
	}
	for i := range l.execs {
		l.start(i)
	}

	phaseStart := time.Now()
	prodDone := make(chan struct{})
	go func() { l.produce(rate, span); close(prodDone) }()
	r.injectFaults(phaseStart.Add(span))
	<-prodDone
	r.healAll()
	healed := time.Now()
	nFaults, faultKinds := r.faultSummary()
	acked, tried, _ := l.counts()
	r.logf("healed after %s of faults (%d: %s); %d jobs acknowledged of %d tried", healed.Sub(phaseStart).Round(time.Second),
		nFaults, faultKinds, acked, tried)

	// Wait until every acknowledged job has its final record, or nothing
	// has moved for two minutes: the loop has no reconciler, so a job the
	// consumer never delivers, or an acknowledged write the stream lost,
	// stays as it is; the run reports them.
	var recs map[int]*floorJob
	finals, moved := -1, time.Now()
	for {
		var err error
		recs, err = l.read()
		if err == nil {
			if n := countFinals(recs); n != finals {
				finals, moved = n, time.Now()
			}
			if l.finished(recs) {
				break
			}
		}
		if time.Since(moved) > 2*time.Minute {
			if err != nil {
				t.Fatalf("cannot read %s after healing: %v", floorStream, err)
			}
			break
		}
		time.Sleep(2 * time.Second)
	}
	settled := time.Now()
	for i := range l.execs {
		l.stop(i)
	}
	consumer := l.consumerState()

	var stalls []floorStall
	var stranded, lost []int
	for id, j := range recs {
		switch {
		case j.finals > 1 || j.creations > 1:
			t.Errorf("job %d has %d creation and %d final records: the loop's compare-and-set failed", id, j.creations, j.finals)
		case j.creations == 0:
			t.Errorf("job %d has a final record without a creation record", id)
		case j.finals == 0:
			stranded = append(stranded, id)
		default:
			stalls = append(stalls, floorStall{id, j.created, j.final.Sub(j.created)})
		}
	}
	lostAnswered := 0
	for id, answered := range l.ackedIDs() {
		if recs[id] == nil {
			lost = append(lost, id)
			if answered {
				lostAnswered++
			}
		}
	}
	slices.Sort(stranded)
	slices.Sort(lost)
	var strandedSeqs []int
	for _, id := range stranded {
		strandedSeqs = append(strandedSeqs, int(recs[id].seq))
	}
	slices.Sort(strandedSeqs)
	slices.SortFunc(stalls, func(a, b floorStall) int { return int(b.d - a.d) })
	pct := func(q float64) time.Duration {
		if len(stalls) == 0 {
			return 0
		}
		return stalls[int(float64(len(stalls)-1)*(1-q))].d
	}
	top := make([]string, 0, 5)
	for _, s := range stalls[:min(5, len(stalls))] {
		top = append(top, fmt.Sprintf("%s (job %d from %s)", s.d.Round(time.Millisecond), s.id, s.from.Format("15:04:05.000")))
	}
	_, _, repeats := l.counts()
	t.Logf(`floor run figures (the minimal durable loop under TestCluster's faults):
  jobs:           %d acknowledged (%d tried), %d with records, %d dispatches redelivered or repeated
  stranded:       %d created and never finished (nothing looks for them: no reconciler) %s at stream seqs %s
  lost:           %d acknowledged creations not in the stream %s (%d of them stored with an answer, the others refused as already there)
  consumer:       %s
  faults:         %d (%s)
  longest stall:  %s (creation record → final record, server time)
  p99 / p50:      %s / %s
  top stalls:     %s
  durations:      faults %s; heal → all finished %s`,
		acked, tried, len(recs), repeats,
		len(stranded), idRanges(stranded), idRanges(strandedSeqs), len(lost), idRanges(lost), lostAnswered, consumer,
		nFaults, faultKinds,
		pct(1), pct(0.99), pct(0.5), strings.Join(top, ", "),
		healed.Sub(phaseStart).Round(time.Second), settled.Sub(healed).Round(time.Second))
}

type floorStall struct {
	id   int
	from time.Time
	d    time.Duration
}

// floorJob is what the stream holds of one job.
type floorJob struct {
	creations, finals int
	created, final    time.Time // the server's stamps
	seq               uint64    // the creation record's
}

const (
	floorStream   = "FLOOR"
	floorPrefix   = "floor."
	floorConsumer = "floor-executors"
	floorAckWait  = 6 * time.Second
	floorFetch    = 32
)

// floorLoop is the minimal durable loop's producer and executors.
type floorLoop struct {
	js    []jetstream.JetStream // one per node's connection
	execs []*floorExec          // executor i uses js[i]

	mu       sync.Mutex
	ack      map[int]bool // acknowledged jobs: true when stored with an answer, false when refused as there
	nTried   int
	nRepeats int
}

// floorExec is one executor's run: stopped by cancel, over when done closes.
type floorExec struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newFloorLoop(t *testing.T, conns []*nats.Conn) *floorLoop {
	t.Helper()
	l := &floorLoop{ack: map[int]bool{}}
	for _, nc := range conns {
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		l.js = append(l.js, js)
		l.execs = append(l.execs, &floorExec{})
	}
	// Right after the nodes start, a request may go unanswered: try again.
	create := func(what string, op func(ctx context.Context) error) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := op(ctx)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("create %s: %v", what, err)
			}
			time.Sleep(time.Second)
		}
	}
	create(floorStream, func(ctx context.Context) error {
		_, err := l.js[0].CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: floorStream, Subjects: []string{floorPrefix + ">"},
			Storage: jetstream.FileStorage, Replicas: 3})
		return err
	})
	create(floorConsumer, func(ctx context.Context) error {
		_, err := l.js[0].CreateOrUpdateConsumer(ctx, floorStream, jetstream.ConsumerConfig{Durable: floorConsumer,
			FilterSubject: floorPrefix + "*.c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: floorAckWait,
			MaxAckPending: 4096})
		return err
	})
	return l
}

// record is job id's creation ("c") or final ("f") record, expecting the
// job's subjects to be at sequence expect.
func floorRecord(id, kind string, expect uint64) *nats.Msg {
	m := nats.NewMsg(floorPrefix + id + "." + kind)
	m.Data = []byte(id)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", floorPrefix+id+".*")
	return m
}

// write stores msg, through the connection of node first and then the
// others, until it is stored or found stored (its compare-and-set fails: a
// write whose answer was lost, or another's) or ctx ends. It reports
// whether it ended so, and whether by a refused compare-and-set.
func (l *floorLoop) write(ctx context.Context, first int, msg func() *nats.Msg) (done, refused bool) {
	for k := first; ctx.Err() == nil; k++ {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.js[k%len(l.js)].PublishMsg(wctx, msg())
		cancel()
		if err == nil || store.IsConflict(err) {
			return true, err != nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false, false
}

// produce creates rate jobs a second for span, each retried until
// acknowledged (bounded by a minute after the span).
func (l *floorLoop) produce(rate int, span time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), span+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(span)
	for id := 0; time.Now().Before(end); id++ {
		<-tick.C
		l.mu.Lock()
		l.nTried++
		l.mu.Unlock()
		wg.Go(func() {
			s := strconv.Itoa(id)
			if done, refused := l.write(ctx, id, func() *nats.Msg { return floorRecord(s, "c", 0) }); done {
				l.mu.Lock()
				l.ack[id] = !refused
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// start starts executor i: it fetches creation records, stores each one's
// final record and acknowledges it.
func (l *floorLoop) start(i int) {
	e := l.execs[i]
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		var cons jetstream.Consumer
		for ctx.Err() == nil {
			if cons == nil {
				bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
				c, err := l.js[i].Consumer(bctx, floorStream, floorConsumer)
				bcancel()
				if err != nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				cons = c
			}
			batch, err := cons.Fetch(floorFetch, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			var wg sync.WaitGroup
			for msg := range batch.Messages() {
				wg.Go(func() { l.finish(ctx, i, msg) })
			}
			wg.Wait()
		}
	}()
}

// finish stores a dispatched job's final record, fenced by its creation's
// sequence, and acknowledges the dispatch.
func (l *floorLoop) finish(ctx context.Context, exec int, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	if md.NumDelivered > 1 {
		l.mu.Lock()
		l.nRepeats++
		l.mu.Unlock()
	}
	id := strings.TrimSuffix(strings.TrimPrefix(msg.Subject(), floorPrefix), ".c")
	if done, _ := l.write(ctx, exec, func() *nats.Msg { return floorRecord(id, "f", md.Sequence.Stream) }); done {
		_ = msg.Ack()
	}
}

// stop stops executor i, dropping the jobs in its hands (redelivered after
// the ack wait).
func (l *floorLoop) stop(i int) {
	if e := l.execs[i]; e.cancel != nil {
		e.cancel()
		<-e.done
		e.cancel = nil
	}
}

func (l *floorLoop) ackedIDs() map[int]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.ack)
}

// counts returns how many jobs were acknowledged and tried, and how many
// dispatches were delivered more than once.
func (l *floorLoop) counts() (acked, tried, repeats int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ack), l.nTried, l.nRepeats
}

// read reads the whole stream (an ordered consumer) into its jobs,
// through the first node that answers it all.
func (l *floorLoop) read() (map[int]*floorJob, error) {
	var errs []error
	for _, js := range l.js {
		jobs, err := readFloor(js)
		if err == nil {
			return jobs, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func readFloor(js jetstream.JetStream) (map[int]*floorJob, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs := map[int]*floorJob{}
	seen := map[uint64]bool{} // an ordered consumer may hand a message again
	err := readStream(ctx, js, floorStream, nil, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		if seen[md.Sequence.Stream] {
			return nil
		}
		seen[md.Sequence.Stream] = true
		rest := strings.TrimPrefix(msg.Subject(), floorPrefix)
		dot := strings.LastIndexByte(rest, '.')
		id, err := strconv.Atoi(rest[:max(dot, 0)])
		if err != nil {
			return fmt.Errorf("subject %s: %w", msg.Subject(), err)
		}
		j := jobs[id]
		if j == nil {
			j = &floorJob{}
			jobs[id] = j
		}
		switch rest[dot+1:] {
		case "c":
			j.creations++
			j.created, j.seq = md.Timestamp, md.Sequence.Stream
		case "f":
			j.finals++
			j.final = md.Timestamp
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

func countFinals(jobs map[int]*floorJob) int {
	n := 0
	for _, j := range jobs {
		n += j.finals
	}
	return n
}

// idRanges renders sorted ids as ranges: [3-7 9].
func idRanges(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i]))
		}
		i = j + 1
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// consumerState renders the executors' consumer's state as its leader
// tells it.
func (l *floorLoop) consumerState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, js := range l.js {
		c, err := js.Consumer(ctx, floorStream, floorConsumer)
		if err == nil {
			i := c.CachedInfo()
			return fmt.Sprintf("delivered up to stream seq %d, ack floor %d, %d pending, %d awaiting ack, %d redelivered",
				i.Delivered.Stream, i.AckFloor.Stream, i.NumPending, i.NumAckPending, i.NumRedelivered)
		}
		errs = append(errs, err)
	}
	return fmt.Sprintf("no answer: %v", errors.Join(errs...))
}

// finished reports whether every acknowledged job has a final record.
func (l *floorLoop) finished(jobs map[int]*floorJob) bool {
	for id := range l.ackedIDs() {
		if j := jobs[id]; j == nil || j.finals == 0 {
			return false
		}
	}
	return true
}
