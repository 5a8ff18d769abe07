package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// newRand returns a seeded random source; AX_E2E_SEED replays a run.
func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AX_E2E_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AX_E2E_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("random seed %d (set AX_E2E_SEED to replay)", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// planned is a task the workload submits and what it must end as.
type planned struct {
	spec      task.Spec
	failTimes int // demo.flaky: failing first attempts
	want      task.State
}

// mix says how many tasks of each kind a workload has.
type mix struct {
	// graphs are DAGs of 3–4 tasks (chains, diamonds, fan-ins) of noop,
	// sleep and flaky tasks, all of which must succeed.
	graphs int
	// failGraphs are 5-task DAGs whose root is a demo.fail with max_retries
	// 1: the root fails, its transitive downstream is cancelled, a sibling
	// succeeds.
	failGraphs int
	// Independent tasks.
	noop, sleep, flaky, fail int
	// failingFlaky is the share of demo.flaky tasks (independent or in
	// graphs) that fail their first 1–2 attempts; the others succeed at
	// once. (Keep the demo types' failure ratios in mind when the
	// orchestrator's circuit breakers are on: the crash tests turn them off.)
	failingFlaky float64
	// fanOut, when not 0, adds to every wave one graph of a root and
	// fanOut-1 tasks depending on it, submitted first: creating it takes
	// long enough for a fault to hit the middle of it.
	fanOut int
	// late tasks are submitted on their own, depending on graph tasks that
	// already exist (some of which will not succeed).
	late int
	// sleepMin, sleepMax bound demo.sleep durations.
	sleepMin, sleepMax time.Duration
}

// summary counts the workload's tasks by kind.
func (w *workload) summary() string {
	byType := map[string]int{}
	failing, withDeps, graphs := 0, 0, 0
	for _, p := range w.tasks {
		byType[p.spec.Type]++
		if p.failTimes > 0 {
			failing++
		}
		if len(p.spec.DependsOn) > 0 {
			withDeps++
		}
	}
	for _, wv := range w.waves {
		graphs += len(wv.graphs)
		if len(wv.fanOut) > 0 {
			graphs++
		}
	}
	return fmt.Sprintf("%d tasks: %v; %d flaky tasks fail 1-2 attempts; %d graphs, %d tasks with dependencies (%d submitted late)",
		len(w.tasks), byType, failing, graphs, withDeps, len(w.late))
}

// wave is one batch of submissions.
type wave struct {
	fanOut  []task.Spec
	singles []task.Spec
	graphs  [][]task.Spec
}

// workload is a generated set of tasks, in creation order.
type workload struct {
	prefix string
	tasks  map[string]*planned
	order  []string
	waves  []wave
	// late are submitted after the waves, each once its upstreams exist.
	late []task.Spec
}

type graphShape struct {
	size  int
	build func(b *builder, g string) []task.Spec
}

// graphShapes are the DAGs of mix.graphs, used in rotation.
var graphShapes = []graphShape{
	{3, func(b *builder, g string) []task.Spec { // chain a → b → c
		a := b.spec(g+"-a", demo.TypeNoop, 0)
		m := b.spec(g+"-b", demo.TypeSleep, 0, a.ID)
		c := b.spec(g+"-c", demo.TypeNoop, 0, m.ID)
		return []task.Spec{a, m, c}
	}},
	{4, func(b *builder, g string) []task.Spec { // diamond a → {b, c} → d
		a := b.spec(g+"-a", demo.TypeNoop, 0)
		l := b.flaky(g+"-b", a.ID)
		r := b.spec(g+"-c", demo.TypeSleep, 0, a.ID)
		d := b.spec(g+"-d", demo.TypeNoop, 0, l.ID, r.ID)
		return []task.Spec{a, l, r, d}
	}},
	{4, func(b *builder, g string) []task.Spec { // fan-in {a, b, c} → d
		x := b.spec(g+"-a", demo.TypeNoop, 0)
		y := b.spec(g+"-b", demo.TypeSleep, 0)
		z := b.flaky(g + "-c")
		d := b.spec(g+"-d", demo.TypeNoop, 0, x.ID, y.ID, z.ID)
		return []task.Spec{x, y, z, d}
	}},
	{3, func(b *builder, g string) []task.Spec { // chain of flaky tasks
		a := b.flaky(g + "-a")
		m := b.spec(g+"-b", demo.TypeNoop, 0, a.ID)
		c := b.flaky(g+"-c", m.ID)
		return []task.Spec{a, m, c}
	}},
}

// builder makes specs and records them in a workload.
type builder struct {
	rng *rand.Rand
	m   mix
	w   *workload
}

// spec returns a new task of a kind with random priority and, for a tenth of
// them, capability "alt" (served by one worker only).
func (b *builder) spec(id, typ string, failTimes int, deps ...string) task.Spec {
	var p demo.Params
	switch typ {
	case demo.TypeSleep:
		d := b.m.sleepMin + time.Duration(b.rng.Int64N(int64(b.m.sleepMax-b.m.sleepMin)+1))
		p.Sleep = d.Round(time.Millisecond).String()
	case demo.TypeFlaky:
		p.FailTimes = failTimes
	}
	p.Label = id
	s, err := task.New(typ, p)
	if err != nil {
		panic(err)
	}
	s.ID = b.w.prefix + "-" + id
	s.DependsOn = deps
	s.Priority = new(b.rng.IntN(task.Levels))
	if b.rng.IntN(10) == 0 {
		s.Capability = "alt"
	}
	if typ == demo.TypeFail {
		s.MaxRetries = new(1)
	}
	b.w.tasks[s.ID] = &planned{spec: s, failTimes: failTimes}
	b.w.order = append(b.w.order, s.ID)
	return s
}

// flaky returns a demo.flaky task that fails its first 1 or 2 attempts (a
// share m.failingFlaky of them) or none.
func (b *builder) flaky(id string, deps ...string) task.Spec {
	failTimes := 0
	if b.rng.Float64() < b.m.failingFlaky {
		failTimes = 1 + b.rng.IntN(2)
	}
	return b.spec(id, demo.TypeFlaky, failTimes, deps...)
}

// failGraph: f (fails) → b → c; e; d depends on f and e.
func (b *builder) failGraph(g string) []task.Spec {
	f := b.spec(g+"-f", demo.TypeFail, 0)
	x := b.spec(g+"-b", demo.TypeNoop, 0, f.ID)
	y := b.spec(g+"-c", demo.TypeSleep, 0, x.ID)
	e := b.spec(g+"-e", demo.TypeNoop, 0)
	d := b.spec(g+"-d", demo.TypeNoop, 0, f.ID, e.ID)
	return []task.Spec{f, x, y, e, d}
}

// newWorkload generates a workload split into n waves of similar size.
func newWorkload(rng *rand.Rand, prefix string, m mix, n int) *workload {
	w := &workload{prefix: prefix, tasks: make(map[string]*planned)}
	b := &builder{rng: rng, m: m, w: w}
	var singles []task.Spec
	var graphs [][]task.Spec
	for i := range m.noop {
		singles = append(singles, b.spec("noop-"+strconv.Itoa(i), demo.TypeNoop, 0))
	}
	for i := range m.sleep {
		singles = append(singles, b.spec("sleep-"+strconv.Itoa(i), demo.TypeSleep, 0))
	}
	for i := range m.flaky {
		singles = append(singles, b.flaky("flaky-"+strconv.Itoa(i)))
	}
	for i := range m.fail {
		singles = append(singles, b.spec("fail-"+strconv.Itoa(i), demo.TypeFail, 0))
	}
	for i := range m.graphs {
		graphs = append(graphs, graphShapes[i%len(graphShapes)].build(b, "g"+strconv.Itoa(i)))
	}
	var failRoots, failDownstream []string
	for i := range m.failGraphs {
		g := b.failGraph("fg" + strconv.Itoa(i))
		graphs = append(graphs, g)
		failRoots = append(failRoots, g[0].ID)
		failDownstream = append(failDownstream, g[1].ID)
	}
	rng.Shuffle(len(singles), func(i, j int) { singles[i], singles[j] = singles[j], singles[i] })
	rng.Shuffle(len(graphs), func(i, j int) { graphs[i], graphs[j] = graphs[j], graphs[i] })
	w.waves = make([]wave, n)
	for i, s := range singles {
		w.waves[i*n/len(singles)].singles = append(w.waves[i*n/len(singles)].singles, s)
	}
	for i, g := range graphs {
		w.waves[i*n/len(graphs)].graphs = append(w.waves[i*n/len(graphs)].graphs, g)
	}
	for k := range w.waves {
		if m.fanOut == 0 {
			break
		}
		g := "fan" + strconv.Itoa(k)
		root := b.spec(g+"-root", demo.TypeNoop, 0)
		w.waves[k].fanOut = []task.Spec{root}
		for i := 1; i < m.fanOut; i++ {
			w.waves[k].fanOut = append(w.waves[k].fanOut, b.spec(g+"-"+strconv.Itoa(i), demo.TypeNoop, 0, root.ID))
		}
	}
	// Late dependents: on a graph task that succeeds, on a failing root, on
	// a task cancelled because of it plus one that succeeds, or on two that
	// succeed.
	for i := range m.late {
		var deps []string
		okTask := func() string {
			return prefix + "-g" + strconv.Itoa(rng.IntN(m.graphs)) + "-a"
		}
		switch {
		case m.graphs == 0 && len(failRoots) == 0:
			panic("late tasks need graphs to depend on")
		case m.graphs == 0 || len(failRoots) > 0 && i%4 == 1:
			deps = []string{failRoots[rng.IntN(len(failRoots))]}
		case len(failRoots) > 0 && i%4 == 2:
			deps = []string{failDownstream[rng.IntN(len(failDownstream))], okTask()}
		case i%4 == 3:
			a, b := okTask(), okTask()
			deps = []string{a}
			if b != a {
				deps = append(deps, b)
			}
		default:
			deps = []string{okTask()}
		}
		w.late = append(w.late, b.spec("late-"+strconv.Itoa(i), demo.TypeNoop, 0, deps...))
	}
	// What each task must end as, in creation order (upstreams first).
	for _, id := range w.order {
		p := w.tasks[id]
		p.want = task.Succeeded
		if p.spec.Type == demo.TypeFail {
			p.want = task.Failed
		}
		for _, d := range p.spec.DependsOn {
			if w.tasks[d].want != task.Succeeded {
				p.want = task.Cancelled
			}
		}
	}
	return w
}

// submitWave submits a wave's independent tasks in one pipelined batch and
// its graphs one by one, retrying through server restarts for up to a
// minute (submissions are idempotent: same ids, same Nats-Msg-Id). It may
// run on its own goroutine while a fault is injected.
func submitWave(cl *sdk.Client, w wave) error {
	if len(w.fanOut) > 0 {
		if err := retry(60*time.Second, func(ctx context.Context) error {
			_, err := cl.SubmitGraph(ctx, slices.Clone(w.fanOut))
			return err
		}); err != nil {
			return fmt.Errorf("submit fan-out graph: %w", err)
		}
	}
	if err := retry(60*time.Second, func(ctx context.Context) error {
		_, err := cl.SubmitMany(ctx, slices.Clone(w.singles))
		return err
	}); err != nil {
		return fmt.Errorf("submit independent tasks: %w", err)
	}
	for _, g := range w.graphs {
		if err := retry(60*time.Second, func(ctx context.Context) error {
			_, err := cl.SubmitGraph(ctx, slices.Clone(g))
			return err
		}); err != nil {
			return fmt.Errorf("submit graph of %s: %w", g[0].ID, err)
		}
	}
	return nil
}

// duringWave submits a wave and injects a fault at a random moment 50–500ms
// after the submission started, while the orchestrator works on it.
func duringWave(t *testing.T, rng *rand.Rand, cl *sdk.Client, w wave, fault func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- submitWave(cl, w) }()
	time.Sleep(time.Duration(50+rng.IntN(450)) * time.Millisecond)
	fault()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// inHand describes the messages the orchestrators hold unacknowledged.
func inHand(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var parts []string
	for _, c := range []struct{ stream, name string }{
		{subject.StreamSubmit, subject.ConsumerSubmit},
		{subject.StreamCompleted, subject.ConsumerCompleted},
		{subject.StreamTimers, subject.ConsumerTimers},
		{subject.StreamTimers, subject.ConsumerLooks},
	} {
		cons, err := js.Consumer(ctx, c.stream, c.name)
		if err != nil {
			parts = append(parts, c.name+": "+err.Error())
			continue
		}
		ci := cons.CachedInfo()
		parts = append(parts, fmt.Sprintf("%s %d unacked/%d pending", strings.TrimPrefix(c.name, "ax-orchestrator-"), ci.NumAckPending, ci.NumPending))
	}
	return strings.Join(parts, ", ")
}

// submitLate submits the late dependents, each once all its upstreams exist
// (a dependency must exist when the task is submitted outside a graph).
func submitLate(t *testing.T, cl *sdk.Client, w *workload, timeout time.Duration) {
	t.Helper()
	pending := slices.Clone(w.late)
	deadline := time.Now().Add(timeout)
	for len(pending) > 0 {
		var rest []task.Spec
		for _, s := range pending {
			exists := true
			for _, d := range s.DependsOn {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cl.Get(ctx, d)
				cancel()
				if err != nil {
					if !errors.Is(err, sdk.ErrNotFound) {
						t.Logf("get %s: %v", d, err)
					}
					exists = false
					break
				}
			}
			if !exists {
				rest = append(rest, s)
				continue
			}
			retryOp(t, 60*time.Second, "submit "+s.ID, func(ctx context.Context) error {
				_, err := cl.Submit(ctx, s)
				return err
			})
		}
		pending = rest
		if len(pending) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("upstreams of %d late tasks do not exist after %s (first: %s on %v)", len(pending), timeout, pending[0].ID, pending[0].DependsOn)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// latestStates reads the current record of every task (the last message of
// each ax.task.<id>).
func latestStates(ctx context.Context, js jetstream.JetStream) (map[string]task.Task, error) {
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]task.Task)
	if info.State.Msgs == 0 {
		return out, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.TaskAll},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		// Polled often: let the server drop it soon.
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(2000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		var pending uint64 = 1
		for msg := range batch.Messages() {
			n++
			var ev task.Event
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				return nil, fmt.Errorf("decode %s: %w", msg.Subject(), err)
			}
			out[subject.TaskID(msg.Subject())] = ev.Task
			md, err := msg.Metadata()
			if err != nil {
				return nil, err
			}
			pending = md.NumPending
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n > 0 && pending == 0 {
			return out, nil
		}
		if n == 0 {
			return nil, errors.New("reading the latest task states stalled")
		}
	}
}

// histories reads the whole AX_TASKS stream: every task's events in order.
func histories(ctx context.Context, js jetstream.JetStream) (map[string][]store.Revisioned, error) {
	out := make(map[string][]store.Revisioned)
	err := readStream(ctx, js, subject.StreamTasks, []string{subject.TaskAll}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		var ev task.Event
		if err := json.Unmarshal(msg.Data(), &ev); err != nil {
			return fmt.Errorf("decode %s at %d: %w", msg.Subject(), md.Sequence.Stream, err)
		}
		id := subject.TaskID(msg.Subject())
		out[id] = append(out[id], store.Revisioned{Revision: md.Sequence.Stream, Event: ev})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readStream reads a stream from its first message to the last it held
// when the read began (an ordered consumer, filtered when filters are
// given), handing each message to each. An ordered consumer that resets
// after a hiccup may hand a message again.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, filters []string,
	each func(msg jetstream.Msg, md *jetstream.MsgMetadata) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return err
	}
	for last := uint64(0); last < info.State.LastSeq; {
		batch, err := cons.Fetch(5000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			last = max(last, md.Sequence.Stream)
			if err := each(msg, md); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("reading %s stalled at sequence %d of %d", stream, last, info.State.LastSeq)
		}
	}
	return nil
}

// waitAllTerminal polls until every task of the workload exists and is in a
// terminal state. On timeout it shows the histories of tasks still open.
func waitAllTerminal(t *testing.T, js jetstream.JetStream, w *workload, timeout time.Duration) {
	t.Helper()
	if d, err := time.ParseDuration(os.Getenv("AX_E2E_TERMINAL_TIMEOUT")); err == nil && d > 0 {
		timeout = d // for investigating slow recoveries
	}
	start := time.Now()
	lastLog := start
	var open, missing []string
	var status string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		states, err := latestStates(ctx, js)
		cancel()
		if err != nil {
			status = err.Error()
		} else {
			missing = missing[:0]
			open = open[:0]
			for _, id := range w.order {
				st, ok := states[id]
				switch {
				case !ok:
					missing = append(missing, id)
				case !st.State.Terminal():
					open = append(open, id)
				}
			}
			status = fmt.Sprintf("%d missing, %d not terminal of %d", len(missing), len(open), len(w.tasks))
			if len(missing) == 0 && len(open) == 0 {
				t.Logf("all %d tasks terminal after %s", len(w.tasks), time.Since(start).Round(100*time.Millisecond))
				return
			}
		}
		if time.Since(start) > timeout {
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("after %s: %s", time.Since(start).Round(time.Second), status)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "  never created: %v (see the orchestrators' logs)\n", missing[:min(len(missing), 10)])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := histories(ctx, js)
	for i, id := range open {
		if i == 5 || err != nil {
			break
		}
		fmt.Fprintf(&b, "  %s:\n%s", id, describe(all[id]))
	}
	t.Fatalf("not all tasks terminal after %s: %s\n%s\n%s", timeout, status, b.String(), streamState(js))
}

// streamState describes every AX stream and consumer, for failure messages.
func streamState(js jetstream.JetStream) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "  stream %s: %v\n", name, err)
			continue
		}
		si := st.CachedInfo()
		fmt.Fprintf(&b, "  stream %s: %d msgs, seq %d..%d\n", name, si.State.Msgs, si.State.FirstSeq, si.State.LastSeq)
		for ci := range st.ListConsumers(ctx).Info() {
			if ci.Config.Durable == "" {
				continue // the tests' own ordered consumers
			}
			fmt.Fprintf(&b, "    consumer %s: delivered %d, ack floor %d, %d pending, %d unacked, %d redelivered, %d waiting\n",
				ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
		}
	}
	return b.String()
}

// progress counts the workload's tasks in a terminal state now.
func progress(js jetstream.JetStream, w *workload) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	states, err := latestStates(ctx, js)
	if err != nil {
		return -1
	}
	n := 0
	for _, id := range w.order {
		if st, ok := states[id]; ok && st.State.Terminal() {
			n++
		}
	}
	return n
}

// checkWorkload asserts the invariants of every task's history and the
// final state each task must end in.
func checkWorkload(t *testing.T, cl *sdk.Client, js jetstream.JetStream, w *workload) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all, err := histories(ctx, js)
	if err != nil {
		t.Fatalf("read histories: %v", err)
	}
	dls, err := cl.DeadLetters(ctx)
	if err != nil {
		t.Fatalf("dead letters: %v", err)
	}
	dlq := make(map[string]task.DeadLetter)
	for _, d := range dls {
		if _, dup := dlq[d.Spec.ID]; dup {
			t.Errorf("task %s has two dead letters", d.Spec.ID)
		}
		dlq[d.Spec.ID] = d
	}

	errs := 0
	fail := func(id, format string, args ...any) {
		errs++
		if errs <= 40 {
			t.Errorf("task %s: %s\n%s", id, fmt.Sprintf(format, args...), describe(all[id]))
		}
	}
	final := make(map[string]task.Task)
	events, totalTakeovers := 0, 0
	for _, id := range w.order {
		h := all[id]
		events += len(h)
		if len(h) == 0 {
			fail(id, "has no history")
			continue
		}
		final[id] = h[len(h)-1].Event.Task
	}
	for id := range all {
		if _, ok := w.tasks[id]; !ok && !strings.HasPrefix(id, warmUpPrefix) {
			fail(id, "exists but was never submitted")
		}
	}
	succeededAt := make(map[string]uint64) // revision of the transition into succeeded
	for _, id := range w.order {
		for _, r := range all[id] {
			if r.Event.Kind == task.KindTransition && r.Event.To == task.Succeeded {
				succeededAt[id] = r.Revision
			}
		}
	}

	for _, id := range w.order {
		h := all[id]
		p := w.tasks[id]
		if len(h) == 0 {
			continue
		}
		var (
			creations, succeeded, released, attempts, takeovers, retries int
			cancelFromActive                                             bool
			prev                                                         task.State
			prevTask                                                     task.Task
			releaseRev                                                   uint64
		)
		for i, r := range h {
			ev := r.Event
			before := prevTask
			prevTask = ev.Task
			if ev.Task.ID != id {
				fail(id, "event at %d holds the record of %q", r.Revision, ev.Task.ID)
			}
			if ev.Task.State != ev.To {
				fail(id, "event at %d: record state %s, event to %s", r.Revision, ev.Task.State, ev.To)
			}
			switch ev.Kind {
			case task.KindTransition:
				if !task.CanTransition(ev.From, ev.To) {
					fail(id, "transition %q -> %s at %d is not allowed", ev.From, ev.To, r.Revision)
				}
				if ev.From == "" {
					creations++
				}
			case task.KindDependentAdded:
				if ev.From != ev.To {
					fail(id, "dependent_added at %d changes the state %s -> %s", r.Revision, ev.From, ev.To)
				}
			default:
				fail(id, "unknown event kind %q at %d", ev.Kind, r.Revision)
			}
			if i == 0 && (ev.Kind != task.KindTransition || ev.From != "") {
				fail(id, "first event is not a creation: %s %q -> %s", ev.Kind, ev.From, ev.To)
			}
			if i > 0 && ev.From != prev {
				fail(id, "event at %d starts from %s, but the task was %s", r.Revision, ev.From, prev)
			}
			prev = ev.To
			if ev.Kind != task.KindTransition {
				continue
			}
			if ev.EndsAttempt() {
				attempts++ // executors write nothing at start: an attempt shows at its end
			}
			switch {
			case ev.To == task.Succeeded:
				succeeded++
			case ev.From == task.Waiting && ev.To == task.Ready:
				released++
				releaseRev = r.Revision
			case ev.From == task.Running && ev.To == task.Running:
				takeovers++
				totalTakeovers++
				if ev.Task.ExecutionID != before.ExecutionID || ev.Task.Attempt != before.Attempt {
					fail(id, "takeover at %d changed the execution %s/attempt %d to %s/attempt %d", r.Revision,
						before.ExecutionID, before.Attempt, ev.Task.ExecutionID, ev.Task.Attempt)
				}
			case ev.EndsAttempt() && ev.To == task.Retrying:
				retries++
			case ev.To == task.Cancelled && ev.From != task.Waiting && ev.From != "":
				cancelFromActive = true
			}
		}
		if creations != 1 {
			fail(id, "%d creation events, want 1", creations)
		}
		if succeeded > 1 {
			fail(id, "%d transitions into succeeded, want at most 1", succeeded)
		}
		f := final[id]
		if f.State != p.want {
			fail(id, "ended %s (%s), want %s", f.State, f.Reason, p.want)
		}

		if len(p.spec.DependsOn) == 0 {
			if h[0].Event.To != task.Ready {
				fail(id, "created %s, want ready (no dependencies)", h[0].Event.To)
			}
		} else {
			allSucceeded := true
			for _, d := range p.spec.DependsOn {
				if final[d].State != task.Succeeded {
					allSucceeded = false
				}
			}
			switch {
			case allSucceeded && released != 1:
				fail(id, "%d waiting->ready transitions with all upstreams succeeded, want 1", released)
			case allSucceeded:
				for _, d := range p.spec.DependsOn {
					if releaseRev < succeededAt[d] {
						fail(id, "released at %d before upstream %s succeeded at %d", releaseRev, d, succeededAt[d])
					}
				}
			case released != 0:
				fail(id, "%d waiting->ready transitions although an upstream did not succeed", released)
			default:
				if f.State != task.Cancelled {
					fail(id, "ended %s although an upstream did not succeed, want cancelled", f.State)
				}
				if cancelFromActive || attempts > 0 {
					fail(id, "ran or was cancelled from an active state although an upstream did not succeed")
				}
				named := ""
				for _, d := range p.spec.DependsOn {
					if strings.Contains(f.Reason, "upstream "+d+" ") && final[d].State != task.Succeeded {
						named = d
					}
				}
				if named == "" {
					fail(id, "cancel reason %q does not name an upstream that did not succeed", f.Reason)
				}
			}
		}

		switch p.want {
		case task.Cancelled:
			if attempts != 0 || succeeded != 0 {
				fail(id, "cancelled task ran: %d attempts ended", attempts)
			}
		}
		switch p.spec.Type {
		case demo.TypeFlaky:
			if p.want == task.Succeeded && (f.Attempt != p.failTimes+1 || len(f.Errors) != p.failTimes || retries != p.failTimes) {
				fail(id, "flaky(fail_times %d) ended on attempt %d with %d errors and %d retries, want attempt %d",
					p.failTimes, f.Attempt, len(f.Errors), retries, p.failTimes+1)
			}
		case demo.TypeFail:
			if f.State == task.Failed && (f.Attempt != 2 || len(f.Errors) != 2) {
				fail(id, "failed on attempt %d with %d errors, want 2 and 2 (max_retries 1)", f.Attempt, len(f.Errors))
			}
		default:
			if p.want == task.Succeeded && (f.Attempt != 1 || retries != 0) {
				fail(id, "succeeded on attempt %d after %d retries, want attempt 1", f.Attempt, retries)
			}
		}
		d, hasDL := dlq[id]
		switch {
		case p.want == task.Failed && !hasDL:
			fail(id, "failed without a dead letter")
		case p.want == task.Failed && len(d.Attempts) != 2:
			fail(id, "dead letter has %d attempts, want 2", len(d.Attempts))
		case p.want != task.Failed && hasDL:
			fail(id, "has a dead letter but ended %s", f.State)
		}
		if p.want == task.Succeeded && attempts != p.failTimes+1 {
			fail(id, "%d attempts ended (and %d takeovers), want %d",
				attempts, takeovers, p.failTimes+1)
		}
	}
	for id := range dlq {
		if _, ok := w.tasks[id]; !ok {
			t.Errorf("dead letter for unknown task %s", id)
		}
	}
	if errs > 40 {
		t.Errorf("... %d failures in all", errs)
	}
	counts := map[task.State]int{}
	for _, f := range final {
		counts[f.State]++
	}
	t.Logf("checked %d tasks, %d events: %v; %d dead letters; %d takeovers", len(w.order), events, counts, len(dlq), totalTakeovers)
}

// describe renders a history for failure messages.
func describe(h []store.Revisioned) string {
	var b strings.Builder
	for _, r := range h {
		from := string(r.Event.From)
		if from == "" {
			from = "(new)"
		}
		fmt.Fprintf(&b, "    %6d %s %-9s -> %-9s %-11s by %s: %s (attempt %d, exec %s, executor %s)\n",
			r.Revision, r.Event.At.Format("15:04:05.000"), from, r.Event.To, r.Event.Kind, r.Event.Actor, r.Event.Reason,
			r.Event.Task.Attempt, r.Event.Task.ExecutionID, r.Event.Task.Executor)
	}
	return b.String()
}
