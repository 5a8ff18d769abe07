package sdk_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// submittedIDs reads every submission stored in AX_SUBMIT (no orchestrator
// runs in these tests, so they stay there) and returns how many times each
// task id was stored.
func submittedIDs(t *testing.T, nc *nats.Conn) map[string]int {
	t.Helper()
	ctx := testenv.Context(t, 2*time.Minute)
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, subject.StreamSubmit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	if info.State.Msgs == 0 {
		return out
	}
	// A work-queue stream allows no ordered consumer: read with a pull
	// consumer that acknowledges nothing (nobody else consumes here).
	cons, err := js.CreateConsumer(ctx, subject.StreamSubmit, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: -1, AckWait: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for read := uint64(0); read < info.State.Msgs; {
		batch, err := cons.Fetch(5000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var last jetstream.Msg
		for msg := range batch.Messages() {
			last = msg
			read++
			var s struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(msg.Data(), &s); err != nil {
				t.Fatal(err)
			}
			out[s.ID]++
		}
		if last == nil {
			t.Fatalf("read %d of %d submissions", read, info.State.Msgs)
		}
		if md, err := last.Metadata(); err == nil && md.NumPending == 0 {
			break
		}
	}
	return out
}

// natsWithStreams starts an embedded server with AX's streams, which an
// orchestrator would create (none runs here, so submissions stay stored).
func natsWithStreams(t testing.TB) *natsserver.Server {
	t.Helper()
	srv := testenv.NATS(t)
	ensureStreams(t, srv.URL())
	return srv
}

func ensureStreams(t testing.TB, url string) {
	t.Helper()
	ensureTopology(t, url, topology.Options{})
}

func ensureTopology(t testing.TB, url string, o topology.Options) {
	t.Helper()
	js, err := jetstream.New(testenv.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := topology.Ensure(testenv.Context(t, 30*time.Second), js, o); err != nil {
		t.Fatal(err)
	}
}

func noop(id string) task.Spec {
	s, _ := task.New("noop", nil)
	s.ID = id
	return s
}

// TestSubmitterBurst: 100,000 Submit calls from 8 goroutines; Close returns
// once every one is acknowledged, and JetStream holds each exactly once.
func TestSubmitterBurst(t *testing.T) {
	t.Parallel()
	submitterBurst(t, false)
}

// TestSubmitterBurstGroupCommit: the same with group commit on, where the
// Submitter stores its batches as atomic batches.
func TestSubmitterBurstGroupCommit(t *testing.T) {
	t.Parallel()
	submitterBurst(t, true)
}

func submitterBurst(t *testing.T, groupCommit bool) {
	const n, workers = 100_000, 8
	srv := testenv.NATS(t)
	ensureTopology(t, srv.URL(), topology.Options{GroupCommit: &groupCommit})
	c := testenv.Client(t, srv.URL())
	var failed atomic.Int64
	s, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{OnError: func(task.Spec, error) { failed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 3*time.Minute)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if _, err := s.Submit(ctx, noop(fmt.Sprintf("burst-%06d", i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Submitted != n || st.Acknowledged != n || st.Failed != 0 || st.Outstanding != 0 || failed.Load() != 0 {
		t.Fatalf("stats %+v, %d OnError calls; want %d submitted and acknowledged", st, failed.Load(), n)
	}
	ids := submittedIDs(t, c.Conn())
	if len(ids) != n {
		t.Fatalf("AX_SUBMIT holds %d distinct tasks, want %d", len(ids), n)
	}
	for id, k := range ids {
		if k != 1 {
			t.Fatalf("task %s stored %d times", id, k)
		}
	}
	js, _ := jetstream.New(c.Conn())
	submits, err := js.Stream(ctx, subject.StreamSubmit)
	if err != nil {
		t.Fatal(err)
	}
	first, err := submits.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if batched := first.Header.Get("Nats-Batch-Id") != ""; batched != groupCommit {
		t.Fatalf("with group commit %v the first submission was stored in an atomic batch: %v", groupCommit, batched)
	}
	if _, err := s.Submit(ctx, noop("late")); !errors.Is(err, sdk.ErrSubmitterClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

// TestSubmitterFlushByTime: with a long flush interval nothing triggers a
// publish but Flush, and a short one publishes a lone task by itself.
func TestSubmitterFlushByTime(t *testing.T) {
	t.Parallel()
	srv := natsWithStreams(t)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	fast, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close(ctx)
	if _, err := fast.Submit(ctx, noop("lone")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the lone task acknowledged without Flush", func() bool { return fast.Stats().Acknowledged == 1 })

	slow, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{FlushInterval: time.Hour, BatchSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := slow.Submit(ctx, noop(fmt.Sprint("held-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if st := slow.Stats(); st.Acknowledged != 0 || st.Outstanding != 10 {
		t.Fatalf("before Flush: %+v", st)
	}
	if err := slow.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := slow.Stats(); st.Acknowledged != 10 || st.Outstanding != 0 {
		t.Fatalf("after Flush: %+v", st)
	}
	if err := slow.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := slow.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Validation errors come back from Submit itself.
	if _, err := slow.Submit(ctx, task.Spec{Type: "bad type"}); err == nil {
		t.Fatal("Submit of an invalid spec after Close succeeded")
	}
}

// TestSubmitterBufferFull: with NATS down nothing is acknowledged, so the
// buffer fills: a FailFast submitter refuses the next task with
// ErrBufferFull, a blocking one blocks (until its context ends, or until
// NATS is back and acknowledgements make room). Every accepted task ends
// up acknowledged; nothing grows beyond MaxBuffered.
func TestSubmitterBufferFull(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	srv, err := natsserver.Start(natsserver.Config{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	cur := srv
	t.Cleanup(func() { cur.Stop() })
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	ensureStreams(t, srv.URL())
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 2*time.Minute)
	cfg := sdk.SubmitterConfig{BatchSize: 5, MaxBuffered: 10, FlushInterval: time.Millisecond, AckTimeout: time.Minute}
	failFastCfg := cfg
	failFastCfg.FailFast = true
	blocking, err := sdk.NewSubmitter(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	failFast, err := sdk.NewSubmitter(c, failFastCfg)
	if err != nil {
		t.Fatal(err)
	}

	cur.Stop()
	testenv.Eventually(t, 30*time.Second, "the client to notice NATS is down", func() bool { return !c.Conn().IsConnected() })
	for i := range 10 {
		if _, err := failFast.Submit(ctx, noop(fmt.Sprint("ff-", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := blocking.Submit(ctx, noop(fmt.Sprint("bl-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := failFast.Submit(ctx, noop("ff-10")); !errors.Is(err, sdk.ErrBufferFull) {
		t.Fatalf("11th Submit of a fail-fast submitter: %v, want ErrBufferFull", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = blocking.Submit(short, noop("bl-x"))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("11th Submit of a blocking submitter: %v, want it to block until its context ended", err)
	}
	unblocked := make(chan error, 1)
	go func() {
		_, err := blocking.Submit(ctx, noop("bl-10"))
		unblocked <- err
	}()
	if st := blocking.Stats(); st.Outstanding != 10 {
		t.Fatalf("blocking submitter: %+v, want 10 outstanding", st)
	}

	if cur, err = natsserver.Start(natsserver.Config{StoreDir: store, Port: port}); err != nil {
		t.Fatal(err)
	}
	if err := <-unblocked; err != nil {
		t.Fatalf("blocked Submit after NATS came back: %v", err)
	}
	if _, err := failFast.Submit(ctx, noop("ff-10")); err != nil {
		// Room comes back with acknowledgements; retry until it has.
		testenv.Eventually(t, time.Minute, "room in the fail-fast buffer", func() bool {
			_, err := failFast.Submit(ctx, noop("ff-10"))
			return err == nil
		})
	}
	for _, s := range []*sdk.Submitter{blocking, failFast} {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ids := submittedIDs(t, c.Conn())
	for i := range 11 {
		for _, p := range []string{"ff-", "bl-"} {
			if ids[fmt.Sprint(p, i)] != 1 {
				t.Fatalf("task %s%d stored %d times, want once", p, i, ids[fmt.Sprint(p, i)])
			}
		}
	}
	if ids["bl-x"] != 0 {
		t.Fatal("the Submit that timed out was stored")
	}
}

// TestSubmitterReportsFailures: tasks that cannot be published (the
// connection is closed) reach OnError with their spec and Close's error.
func TestSubmitterReportsFailures(t *testing.T) {
	t.Parallel()
	srv := natsWithStreams(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdk.New(testenv.Context(t, 30*time.Second), nc)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reported []string
	s, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{FlushInterval: time.Hour, MaxAttempts: 2,
		OnError: func(spec task.Spec, err error) {
			mu.Lock()
			reported = append(reported, spec.ID)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	for i := range 3 {
		if _, err := s.Submit(ctx, noop(fmt.Sprint("lost-", i))); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	err = s.Close(ctx)
	var se *sdk.SubmitError
	if !errors.As(err, &se) || se.Failed != 3 {
		t.Fatalf("Close: %v, want a SubmitError for 3 tasks", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(reported, ",") != "lost-0,lost-1,lost-2" {
		t.Fatalf("OnError saw %v", reported)
	}
}

// The producer process of TestSubmitterKill9: it submits rounds of 1,000
// tasks, prints "flushed <round>" once Flush returned for a round and
// "failed <id>" for every failure, until it is killed.
func TestSubmitterHelperProcess(t *testing.T) {
	url := os.Getenv("AX_SUBMITTER_HELPER_URL")
	if url == "" {
		return // only run as the child of TestSubmitterKill9
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
		mu.Unlock()
	}
	c, err := sdk.Connect(context.Background(), url)
	if err != nil {
		say("error %v", err)
		os.Exit(2)
	}
	s, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{BatchSize: 100, FlushInterval: 5 * time.Millisecond,
		OnError: func(spec task.Spec, err error) { say("failed %s %v", spec.ID, err) }})
	if err != nil {
		say("error %v", err)
		os.Exit(2)
	}
	ctx := context.Background()
	for round := 0; ; round++ {
		say("round %d", round)
		for i := range 1000 {
			if i == 500 {
				say("half %d", round)
			}
			if _, err := s.Submit(ctx, noop(fmt.Sprintf("k-%03d-%04d", round, i))); err != nil {
				say("error %v", err)
				os.Exit(2)
			}
		}
		if err := s.Flush(ctx); err != nil {
			say("flush error %v", err)
			continue
		}
		say("flushed %d", round)
	}
}

// TestSubmitterKill9: a producer process is killed with SIGKILL while it
// submits. Every task it reported acknowledged (its round's Flush returned
// without error) is in JetStream, once; tasks it had not acknowledged may
// or may not be; no task exists that it never submitted.
func TestSubmitterKill9(t *testing.T) {
	t.Parallel()
	srv := natsWithStreams(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSubmitterHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AX_SUBMITTER_HELPER_URL="+srv.URL())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	flushed := map[int]bool{}
	started := -1
	var failedIDs []string
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "round":
			started, _ = strconv.Atoi(f[1])
		case len(f) >= 2 && f[0] == "flushed":
			r, _ := strconv.Atoi(f[1])
			flushed[r] = true
		case len(f) >= 2 && f[0] == "half":
			if len(flushed) >= 5 && !killed {
				// Mid-way through a round: some of it buffered, some in flight.
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed = true
			}
		case len(f) >= 2 && f[0] == "failed":
			failedIDs = append(failedIDs, f[1])
		default:
			t.Logf("producer: %s", sc.Text())
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("the producer exited before it was killed (flushed %d rounds)", len(flushed))
	}
	if len(failedIDs) > 0 {
		t.Fatalf("the producer reported failures: %v", failedIDs)
	}
	ids := submittedIDs(t, testenv.Conn(t, srv.URL()))
	for r := range flushed {
		for i := range 1000 {
			id := fmt.Sprintf("k-%03d-%04d", r, i)
			if ids[id] != 1 {
				t.Fatalf("task %s of acknowledged round %d stored %d times, want once", id, r, ids[id])
			}
		}
	}
	extra := 0
	for id, k := range ids {
		var r, i int
		if _, err := fmt.Sscanf(id, "k-%03d-%04d", &r, &i); err != nil || r > started || k != 1 {
			t.Fatalf("unexpected submission %s (stored %d times; last round started %d)", id, k, started)
		}
		if !flushed[r] {
			extra++
		}
	}
	t.Logf("killed during round %d: %d rounds acknowledged, %d tasks of unacknowledged rounds stored anyway", started, len(flushed), extra)
}

// BenchmarkSubmitterSubmit measures Submit against a real server, with
// publishing and acknowledgements running behind it. "call": a buffer
// large enough that no call waits for room, so ns/op is the cost of one
// call (validate, encode, buffer; run with -benchtime 100000x or less).
// "sustained": the default bounded buffer, so Submit waits whenever the
// server falls behind and tasks/s is the acknowledged rate.
func BenchmarkSubmitterSubmit(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  sdk.SubmitterConfig
	}{
		{"call", sdk.SubmitterConfig{MaxBuffered: 1 << 20}},
		{"sustained", sdk.SubmitterConfig{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := natsWithStreams(b)
			c := testenv.Client(b, srv.URL())
			s, err := sdk.NewSubmitter(c, bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			spec := noop("x")
			b.ReportAllocs()
			begin := time.Now()
			for i := 0; b.Loop(); i++ {
				spec.ID = "bench-" + strconv.Itoa(i)
				if _, err := s.Submit(ctx, spec); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Close(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(s.Stats().Acknowledged)/time.Since(begin).Seconds(), "acked_tasks/s")
		})
	}
}
