package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/task"
)

// TestMixedFleet is issue 31's proof: a mixed fleet — Go and TypeScript
// executor processes (two of each, the adapters' executor mode) on one
// capability — runs N conf.behave tasks, submitted in chunks by a Go and a
// TypeScript producer process, while the suite injects faults: kill -9 of
// executors of both languages (each restarted as a new incarnation with a
// new executor id), SIGSTOP/SIGCONT of an executor until its running tasks
// are taken over, and kill -9 + restart of the orchestrator. It waits, by
// the task events, until every task is terminal, drains the executors, and
// checks from the histories (read by the suite from AX_TASKS) and the
// handlers' events:
//
//   - every task succeeded, once (exactly one terminal transition, one
//     succeeded), with its result, after as many attempts as its behaviour
//     demands (a flaky task fails its first attempts, whoever runs them);
//   - none ran twice: per task and attempt, at most one handler start on an
//     executor incarnation that was never killed or stopped; every other
//     start of that attempt was on an incarnation killed (kill -9) or
//     stopped (before its SIGCONT, or holding the attempt claimed: taken
//     over from it) — the at-least-once re-runs the faults explain — and
//     no incarnation started the same attempt twice in a row unless it was
//     stopped with the first run in hand;
//   - the run that ended each task is seen (its executor's start event, or
//     a taken-over run's when the record names an executor killed right
//     after its claim: counted);
//   - both languages ran at least a fifth of the tasks.
//
// N is 1,000 with one fault of each kind by default; AX_CONFORMANCE_FLEET=N
// (10000 for the figure) runs N tasks with every fault repeated
// (README.md).
func TestMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server, an orchestrator and executor processes of both languages")
	}
	if a := os.Getenv("AX_CONFORMANCE_ADAPTERS"); a != "" && !(strings.Contains(a, "go") && strings.Contains(a, "ts")) {
		t.Skip("the mixed fleet needs both adapters (AX_CONFORMANCE_ADAPTERS names " + a + ")")
	}
	n, full := 1000, false
	if v := os.Getenv("AX_CONFORMANCE_FLEET"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("AX_CONFORMANCE_FLEET=%q: want a number of tasks", v)
		}
		full = true
	}
	f := newFleet(t, n)
	f.run(full)
}

// fleetTask is one task of the fleet and what its behaviour demands.
type fleetTask struct {
	id    string
	kind  string // succeed, sleep, flaky
	fails int    // attempts a flaky task fails
}

// fleetExec is one executor slot (go-1, ts-2…) and its current
// incarnation: each start is a new process with a new executor id.
type fleetExec struct {
	slot string
	ad   adapter
	gen  int
	id   string
	p    *proc
}

type fleet struct {
	t          *testing.T
	e          *env
	n          int
	capability string
	ackWait    time.Duration
	tasks      []fleetTask
	index      map[string]int
	execs      []*fleetExec
	ads        map[string]adapter

	mu      sync.Mutex
	changed chan struct{}
	starts  []event                    // the handlers' started events, in arrival order
	running map[string]map[string]bool // executor id → its sleep tasks running now
	hist    map[string][]task.HistoryEntry
	ended   map[string]bool
	killed  map[string]bool // executor ids killed with SIGKILL
	contAt  map[string]int  // stopped executor id → len(starts) at its SIGCONT
	// stoppedAt is when each stopped executor's every thread was seen
	// stopped (Unix ms): a handler that read its clock before then
	// started before the SIGSTOP.
	stoppedAt map[string]float64
	faultLog  []string
	// faultAt is when each fault is due (tasks ended); faultsDone counts
	// those done.
	faultAt    []int
	faultsDone int
}

func newFleet(t *testing.T, n int) *fleet {
	f := &fleet{t: t, n: n, capability: "fleet", ackWait: 6 * time.Second, index: map[string]int{},
		changed: make(chan struct{}), running: map[string]map[string]bool{}, hist: map[string][]task.HistoryEntry{},
		ended: map[string]bool{}, killed: map[string]bool{}, contAt: map[string]int{}, stoppedAt: map[string]float64{},
		ads: map[string]adapter{"go": newAdapter(t, "go"), "ts": newAdapter(t, "ts")}}
	for i := range n {
		ft := fleetTask{id: fmt.Sprintf("fleet-%05d", i), kind: "succeed"}
		switch i % 10 {
		case 3:
			ft.kind = "sleep" // long enough for kills and stops to hit running handlers
		case 7:
			ft.kind, ft.fails = "flaky", 1+(i/10)%2
		}
		f.index[ft.id] = i
		f.tasks = append(f.tasks, ft)
	}
	return f
}

// payload is task i's behaviour; its result is i.
func (f *fleet) payload(i int) map[string]any {
	ft := f.tasks[i]
	var st map[string]any
	switch ft.kind {
	case "succeed":
		st = map[string]any{"do": "succeed", "result": i}
	case "sleep":
		st = map[string]any{"do": "sleep", "ms": 100 + (i*37)%2900, "result": i}
	case "flaky":
		st = map[string]any{"do": "flaky", "attempts": ft.fails, "error": "flaky", "result": i}
	}
	return map[string]any{"steps": []any{st}}
}

// signal wakes the waiters; f.mu held.
func (f *fleet) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// waitFor waits until ok (called with f.mu held) or ctx ends.
func (f *fleet) waitFor(ctx context.Context, ok func() bool) error {
	for {
		f.mu.Lock()
		if ok() {
			f.mu.Unlock()
			return nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fleet) onEvent(m *nats.Msg) {
	var ev event
	if json.Unmarshal(m.Data, &ev) != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.index[ev.ID]
	if !ok {
		return
	}
	switch ev.Event {
	case "started":
		f.starts = append(f.starts, ev)
		if f.tasks[i].kind == "sleep" {
			if f.running[ev.Executor] == nil {
				f.running[ev.Executor] = map[string]bool{}
			}
			f.running[ev.Executor][ev.ID] = true
		}
	case "finished", "aborted":
		delete(f.running[ev.Executor], ev.ID)
	}
	f.signal()
}

func (f *fleet) onTaskEvent(m jetstream.Msg) {
	var ev task.Event
	if json.Unmarshal(m.Data(), &ev) != nil {
		return
	}
	tokens := strings.Split(m.Subject(), ".") // ax.task.<id>.e|d…
	if len(tokens) < 4 {
		return
	}
	id := tokens[2]
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.index[id]; !ok {
		return
	}
	f.hist[id] = append(f.hist[id], task.HistoryEntry{Revision: meta.Sequence.Stream, Event: ev})
	if ev.Kind == task.KindTransition && ev.To.Terminal() && !f.ended[id] {
		f.ended[id] = true
		f.signal()
	}
}

func (f *fleet) endedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ended)
}

// startExec starts slot's next incarnation and waits until it pulls.
func (f *fleet) startExec(ctx context.Context, x *fleetExec) {
	if err := f.launch(ctx, x)(); err != nil {
		f.t.Fatal(err)
	}
}

// launch starts slot's next incarnation and returns how to wait until it
// pulls (a goroutine may wait).
func (f *fleet) launch(ctx context.Context, x *fleetExec) (ready func() error) {
	x.gen++
	x.id = fmt.Sprintf("%s-r%d", x.slot, x.gen)
	env := append(f.e.userEnv(""), "AX_CAPABILITY="+f.capability, "AX_EXECUTOR_ID="+x.id,
		"AX_CAPACITY=32", "AX_ACK_WAIT_MS="+strconv.Itoa(int(f.ackWait.Milliseconds())))
	p, _, out := startProc(f.t, f.e.dir, x.id, x.ad.executor, env, false)
	x.p = p
	done := make(chan error, 1)
	go func() { // ends when the process printed ready, exited, or ctx ended
		done <- waitLine(ctx, p, out, func(l string) bool { return strings.TrimSpace(l) == "ready" })
	}()
	return func() error { return <-done }
}

func (f *fleet) logf(format string, args ...any) {
	line := fmt.Sprintf("%5d/%d ended: ", f.endedCount(), f.n) + fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.faultLog = append(f.faultLog, line)
	f.mu.Unlock()
	f.t.Log(line)
}

// awaitRunning waits (a while) until x runs one of the sleep tasks, so
// that the fault hits a running handler, and returns those it runs.
func (f *fleet) awaitRunning(ctx context.Context, x *fleetExec) []string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = f.waitFor(ctx, func() bool { return len(f.running[x.id]) > 0 })
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.running[x.id] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// kill9 kills x's process with SIGKILL and starts its next incarnation.
func (f *fleet) kill9(ctx context.Context, x *fleetExec) {
	running := f.awaitRunning(ctx, x)
	f.mu.Lock()
	f.killed[x.id] = true
	f.mu.Unlock()
	x.p.kill9(f.t)
	f.logf("kill -9 %s (running %d sleep tasks)", x.id, len(running))
	f.startExec(ctx, x)
}

// stop stops x's process with SIGSTOP until another executor started one
// of the tasks it was running (a takeover), then continues it.
func (f *fleet) stop(ctx context.Context, x *fleetExec) {
	running := f.awaitRunning(ctx, x)
	f.mu.Lock()
	from := len(f.starts)
	f.contAt[x.id] = -1 // stopped, not continued yet
	f.mu.Unlock()
	if err := x.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		f.t.Fatalf("SIGSTOP %s: %v", x.id, err)
	}
	if err := awaitStopped(ctx, x.p.cmd.Process.Pid); err != nil {
		f.t.Fatalf("SIGSTOP %s: %v", x.id, err)
	}
	f.mu.Lock()
	f.stoppedAt[x.id] = float64(time.Now().UnixNano()) / 1e6
	f.mu.Unlock()
	f.logf("SIGSTOP %s (running %d sleep tasks)", x.id, len(running))
	wctx, cancel := context.WithTimeout(ctx, 4*f.ackWait)
	err := f.waitFor(wctx, func() bool {
		for _, ev := range f.starts[from:] {
			if ev.Executor != x.id && slices.Contains(running, ev.ID) {
				return true
			}
		}
		return false
	})
	cancel()
	f.mu.Lock()
	f.contAt[x.id] = len(f.starts)
	f.mu.Unlock()
	if err := x.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		f.t.Fatalf("SIGCONT %s: %v", x.id, err)
	}
	took := "one of its tasks taken over"
	if err != nil {
		took = "no takeover seen within " + (4 * f.ackWait).String()
	}
	f.logf("SIGCONT %s (%s)", x.id, took)
}

// awaitStopped waits until every thread of process pid is stopped: a
// signal is delivered to a running thread some time after kill(2)
// returns.
func awaitStopped(ctx context.Context, pid int) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("reading its threads: %w", err)
		}
		stopped := len(threads) > 0
		for _, th := range threads {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, th.Name()))
			if err != nil {
				stopped = false // a thread that exited meanwhile: look again
				break
			}
			// The state follows the command name, which is in parentheses.
			rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
			if f := strings.Fields(string(rest)); len(f) == 0 || (f[0] != "T" && f[0] != "t") {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for its threads to stop: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// fault is one fault of the run, done once that share of the tasks ended.
type fault struct {
	at   float64
	what string // kill:<slot>, stop:<slot>, orchestrator
}

func (f *fleet) run(full bool) {
	t := f.t
	deadline := 5 * time.Minute
	faults := []fault{{0.1, "kill:go-1"}, {0.2, "kill:ts-1"}, {0.3, "orchestrator"}, {0.4, "stop:go-2"}}
	if full {
		deadline = time.Duration(f.n/100+20) * time.Minute
		faults = []fault{{0.08, "kill:go-1"}, {0.16, "kill:ts-1"}, {0.24, "stop:go-2"}, {0.32, "orchestrator"},
			{0.4, "kill:ts-2"}, {0.4, "kill:go-1"}, {0.5, "stop:ts-1"}, {0.6, "kill:go-2"}, {0.68, "orchestrator"},
			{0.76, "kill:ts-1"}, {0.76, "kill:ts-2"}, {0.84, "stop:go-1"}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	f.e = startEnv(t, false)
	sub, err := f.e.nc.Subscribe("conformance.events."+f.capability, f.onEvent)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	cons, err := f.e.js.OrderedConsumer(ctx, "AX_TASKS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"ax.task.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(f.onTaskEvent)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()

	t.Cleanup(func() { // after a failure: nothing left running
		for _, x := range f.execs {
			if x.p.alive() {
				_ = x.p.cmd.Process.Signal(syscall.SIGCONT)
				_ = x.p.term(30 * time.Second)
			}
		}
	})
	var readies []func() error
	for _, slot := range []string{"go-1", "go-2", "ts-1", "ts-2"} {
		x := &fleetExec{slot: slot, ad: f.ads[slot[:2]]}
		f.execs = append(f.execs, x)
		readies = append(readies, f.launch(ctx, x))
	}
	for _, ready := range readies {
		if err := ready(); err != nil {
			t.Fatal(err)
		}
	}
	var producers []*producer
	for _, lang := range []string{"go", "ts"} {
		pr, err := startProducer(ctx, t, f.e.dir, lang+"-producer", f.ads[lang].producer, f.e.userEnv(""))
		if err != nil {
			t.Fatal(err)
		}
		producers = append(producers, pr)
	}
	defer func() {
		for _, pr := range producers {
			if err := pr.close(); err != nil {
				t.Errorf("producer: %v", err)
			}
		}
	}()

	// Submit in chunks, alternating the producers, with at most `window`
	// tasks unfinished, and none beyond `window` past the next fault's
	// turn until it is done: each fault hits a fleet with work in hand and
	// submissions in flight, however long a restart takes.
	chunk := max(50, min(250, f.n/20))
	window := max(4*chunk, f.n/10)
	for _, ft := range faults {
		f.faultAt = append(f.faultAt, int(ft.at*float64(f.n)))
	}
	start := time.Now()
	submitted := make(chan error, 1)
	go func() { // ends with its last chunk (or ctx)
		submitted <- f.submit(ctx, producers, chunk, window)
	}()

	slot := func(name string) *fleetExec {
		for _, x := range f.execs {
			if x.slot == name {
				return x
			}
		}
		t.Fatalf("no executor slot %s", name)
		return nil
	}
	orchestrators := 1
	for _, ft := range faults {
		if err := f.waitFor(ctx, func() bool { return float64(len(f.ended)) >= ft.at*float64(f.n) }); err != nil {
			t.Fatalf("before %s: %d of %d tasks ended: %v", ft.what, f.endedCount(), f.n, err)
		}
		kind, name, _ := strings.Cut(ft.what, ":")
		switch kind {
		case "kill":
			f.kill9(ctx, slot(name))
		case "stop":
			f.stop(ctx, slot(name))
		case "orchestrator":
			orchestrators++
			f.e.restartOrchestrator(fmt.Sprintf("orchestrator-%d", orchestrators))
			f.logf("kill -9 and restart of the orchestrator")
		}
		f.mu.Lock()
		f.faultsDone++
		f.signal()
		f.mu.Unlock()
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if err := f.waitFor(ctx, func() bool { return len(f.ended) == f.n }); err != nil {
		f.mu.Lock()
		var open []string
		for _, ft := range f.tasks {
			if !f.ended[ft.id] && len(open) < 20 {
				h := f.hist[ft.id]
				state := "not created"
				if len(h) > 0 {
					state = string(h[len(h)-1].Event.To)
				}
				open = append(open, ft.id+" "+state)
			}
		}
		f.mu.Unlock()
		t.Fatalf("%d of %d tasks ended: %v; not ended (first 20): %v", f.endedCount(), f.n, err, open)
	}
	elapsed := time.Since(start)

	// Drain every executor (each must exit cleanly), so every run that
	// started has published its events; then make sure they arrived.
	drain := time.Now()
	for _, x := range f.execs {
		if err := x.p.term(30 * time.Second); err != nil {
			t.Errorf("%v\n%s", err, tail(x.p.logPath, 20))
		}
	}
	if err := f.e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	drained, checking := time.Since(drain), time.Now()
	f.check(ctx, elapsed)
	t.Logf("executors drained in %s; checked in %s", drained.Round(time.Millisecond), time.Since(checking).Round(time.Millisecond))
}

// submit submits the fleet's tasks in chunks through the producers.
func (f *fleet) submit(ctx context.Context, producers []*producer, chunk, window int) error {
	for first, c := 0, 0; first < f.n; c++ {
		last := min(first+chunk, f.n)
		if err := f.waitFor(ctx, func() bool {
			return len(f.ended) >= last-window && (f.faultsDone == len(f.faultAt) || last-window <= f.faultAt[f.faultsDone])
		}); err != nil {
			return fmt.Errorf("submitting tasks %d…: %d ended: %w", first, f.endedCount(), err)
		}
		specs := make([]map[string]any, 0, last-first)
		for i := first; i < last; i++ {
			specs = append(specs, map[string]any{"id": f.tasks[i].id, "type": "conf.behave", "capability": f.capability,
				"priority": i % 6, "max_retries": 5, "payload": f.payload(i)})
		}
		pr := producers[c%len(producers)]
		for try := 1; ; try++ {
			// A submission is idempotent by id: one that failed (the
			// orchestrator restarting) is sent again.
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			rep, err := pr.call(rctx, map[string]any{"op": "submit_many", "specs": specs, "timeout_ms": 60000})
			cancel()
			if err == nil {
				var ids []string
				if err := json.Unmarshal(rep["ids"], &ids); err != nil || len(ids) != len(specs) {
					return fmt.Errorf("submit_many of tasks %d…%d replied %s", first, last-1, rep["ids"])
				}
				for k, id := range ids {
					if id != f.tasks[first+k].id {
						return fmt.Errorf("submit_many returned id %s for %s", id, f.tasks[first+k].id)
					}
				}
				break
			}
			if try == 5 || ctx.Err() != nil {
				return fmt.Errorf("submit_many of tasks %d…%d through %s: %w", first, last-1, pr.p.name, err)
			}
			f.logf("submit_many of tasks %d…%d through %s: %v (again)", first, last-1, pr.p.name, err)
		}
		first = last
	}
	return nil
}

// check checks every task's history and the handlers' starts, and logs
// the run's figures.
func (f *fleet) check(ctx context.Context, elapsed time.Duration) {
	t := f.t
	f.mu.Lock()
	defer f.mu.Unlock()
	lang := func(executor string) string { return executor[:min(2, len(executor))] }

	// Starts by task and attempt.
	type key struct {
		id      string
		attempt int
	}
	starts := map[key][]int{} // indexes into f.starts
	startsByLang := map[string]int{}
	for i, ev := range f.starts {
		k := key{ev.ID, ev.Attempt}
		starts[k] = append(starts[k], i)
		startsByLang[lang(ev.Executor)]++
	}
	// A start is excused (its run may have been lost, or run on, while
	// another ran the attempt again) when its executor was killed later
	// (every start of a killed incarnation came before its death), or
	// stopped and either the start came before its SIGCONT, or the
	// handler's own clock puts it before the SIGSTOP (its event was still
	// buffered), or the history shows the attempt taken over from it (it
	// held the attempt, claimed, when it was stopped: the handler may
	// start only after the SIGCONT). A dispatch it held, unstarted, while
	// stopped is not excused: it must be left to its redelivery.
	excused := func(i int) (string, bool) {
		ev := f.starts[i]
		if f.killed[ev.Executor] {
			return "kill -9", true
		}
		cont, stopped := f.contAt[ev.Executor]
		switch {
		case !stopped:
			return "", false
		case i < cont:
			return "SIGSTOP", true
		case ev.AtMS > 0 && ev.AtMS <= f.stoppedAt[ev.Executor]:
			return "SIGSTOP (started before it)", true
		case takenOverFrom(f.hist[ev.ID], ev.Attempt, ev.Executor):
			return "SIGSTOP (held it claimed)", true
		}
		return "", false
	}

	var bad []string
	fail := func(format string, args ...any) {
		if len(bad) < 50 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	successByLang := map[string]int{}
	retried, attempts := 0, 0
	reruns := map[string]int{} // by the fault that explains them, e.g. "kill -9 ts"
	rerunTasks := []string{}
	var misnamed []string // tasks whose record names an executor that did not run the succeeding handler
	var again []string    // tasks started again on the executor that was stopped with the first run in hand
	for i, ft := range f.tasks {
		h := f.hist[ft.id]
		if len(h) == 0 {
			fail("%s: no history", ft.id)
			continue
		}
		last := h[len(h)-1].Event.Task
		ends, successes := 0, 0
		for _, e := range h {
			if e.Event.Kind == task.KindTransition && e.Event.To.Terminal() && e.Event.From != e.Event.To {
				ends++
			}
			if e.Event.Kind == task.KindTransition && e.Event.To == task.Succeeded {
				successes++
			}
		}
		if ends != 1 || successes != 1 {
			fail("%s: %d terminal transitions, %d to succeeded, want 1 each:\n%s", ft.id, ends, successes, describe(h))
		}
		if last.State != task.Succeeded {
			fail("%s: %s (%s), want succeeded:\n%s", ft.id, last.State, last.Reason, describe(h))
			continue
		}
		if !jsonEqual(last.Result, json.RawMessage(strconv.Itoa(i))) {
			fail("%s: result %s, want %d", ft.id, last.Result, i)
		}
		if last.Attempt != ft.fails+1 || len(last.Errors) != ft.fails {
			fail("%s (%s): attempt %d with %d errors %+v, want attempt %d after %d failures:\n%s", ft.id, ft.kind,
				last.Attempt, len(last.Errors), last.Errors, ft.fails+1, ft.fails, describe(h))
		}
		if ft.fails > 0 {
			retried++
		}
		attempts += last.Attempt
		successByLang[lang(last.Executor)]++

		// The handler's starts, attempt by attempt.
		for a := 1; a <= last.Attempt; a++ {
			idx := starts[key{ft.id, a}]
			clean, prev, prevIdx := 0, "", -1
			var whys []string
			for _, i := range idx {
				ev := f.starts[i]
				// An executor may start an attempt again after another did
				// (it lost the attempt, the other lost it too, and it got it
				// back), or after it was stopped while the first run was in
				// hand (that run outlived the ack wait and was delivered
				// again before its report was applied) — never otherwise.
				if cont, stopped := f.contAt[ev.Executor]; ev.Executor == prev && !(stopped && prevIdx < cont) {
					fail("%s attempt %d: started twice in a row on %s (starts %v):\n%s", ft.id, a, ev.Executor,
						f.executorsOf(idx), describe(h))
				} else if ev.Executor == prev {
					if len(again) < 3 {
						t.Logf("%s attempt %d started again on %s, stopped with its first run in hand (starts %v):\n%s", ft.id, a,
							ev.Executor, f.executorsOf(idx), describe(h))
					}
					again = append(again, ft.id)
				}
				prev, prevIdx = ev.Executor, i
				if why, ok := excused(i); ok {
					whys = append(whys, why+" "+lang(ev.Executor))
				} else {
					clean++
				}
			}
			if clean > 1 {
				fail("%s attempt %d: started %d times on executors never killed or stopped (%d starts in all: %v):\n%s",
					ft.id, a, clean, len(idx), f.executorsOf(idx), describe(h))
			}
			if len(idx) > 1 {
				if !slices.Contains(rerunTasks, ft.id) {
					rerunTasks = append(rerunTasks, ft.id)
				}
				// Each start but one is a re-run; the excused ones explain
				// them (unexplained ones failed above).
				for _, w := range whys[:min(len(whys), len(idx)-1)] {
					reruns[w]++
				}
			}
		}
		// The run that ended the task was seen starting: on the executor
		// its record names (the last to claim the attempt), or, when that
		// one was killed before it started the handler, on one whose run
		// was taken over and whose report was applied all the same (the
		// record then still names the one that took over: counted).
		final := starts[key{ft.id, last.Attempt}]
		found, takenOver := false, false
		for _, i := range final {
			found = found || f.starts[i].Executor == last.Executor
			if _, ok := excused(i); ok {
				takenOver = true
			}
		}
		switch {
		case found:
		case f.killed[last.Executor] && takenOver:
			if len(misnamed) < 3 {
				t.Logf("%s succeeded by the report of a run taken over (started on %v); the record names %s, killed before it started the handler:\n%s",
					ft.id, f.executorsOf(final), last.Executor, describe(h))
			}
			misnamed = append(misnamed, ft.id)
		default:
			fail("%s: no start of attempt %d on %s (the executor of its success) among %v:\n%s", ft.id, last.Attempt,
				last.Executor, f.executorsOf(final), describe(h))
		}
	}
	for _, b := range bad {
		t.Error(b)
	}

	// A few histories again through the Go SDK, as any reader sees them:
	// re-run tasks (50 at most) and a sample.
	sample := slices.Clone(rerunTasks[:min(len(rerunTasks), 50)])
	for i := 0; i < f.n; i += max(1, f.n/50) {
		sample = append(sample, f.tasks[i].id)
	}
	f.mu.Unlock()
	for _, id := range sample {
		h, err := f.e.client.History(ctx, id)
		f.mu.Lock()
		mine := f.hist[id]
		f.mu.Unlock()
		if err != nil || len(h) != len(mine) || h[len(h)-1].Revision != mine[len(mine)-1].Revision {
			t.Errorf("%s: the Go SDK's history (%d events, %v) is not the one the suite followed (%d events)", id, len(h), err, len(mine))
		}
	}
	f.mu.Lock()

	share := func(m map[string]int, total int) string {
		return fmt.Sprintf("go %d (%.1f%%), ts %d (%.1f%%)", m["go"], 100*float64(m["go"])/float64(max(1, total)),
			m["ts"], 100*float64(m["ts"])/float64(max(1, total)))
	}
	var rr []string
	total := 0
	for w, c := range reruns {
		rr = append(rr, fmt.Sprintf("%d after %s", c, w))
		total += c
	}
	sort.Strings(rr)
	summary := []string{
		fmt.Sprintf("mixed fleet: %d tasks (%d flaky, retried; %d attempts in all) on 2 Go + 2 TypeScript executors, all terminal in %s",
			f.n, retried, attempts, elapsed.Round(time.Millisecond)),
		"succeeded by: " + share(successByLang, f.n),
		fmt.Sprintf("handler starts: %d, by %s", len(f.starts), share(startsByLang, len(f.starts))),
		fmt.Sprintf("attempts run again: %d re-runs of %d tasks (%s), each explained by a fault of an executor that had started it",
			total, len(rerunTasks), strings.Join(rr, ", ")),
		fmt.Sprintf("successes reported by a run that was taken over, the record naming the (killed) executor that took over: %d %v",
			len(misnamed), misnamed),
		fmt.Sprintf("attempts started again on the executor stopped with the first run in hand: %d %v", len(again), again),
		"faults:",
	}
	summary = append(summary, f.faultLog...)
	t.Log("\n" + strings.Join(summary, "\n"))
	fmt.Println(strings.Join(summary, "\n"))

	// Both languages ran a substantial share (each executor has the same
	// capacity; a language that ran a fifth of the tasks is no bystander).
	for _, l := range []string{"go", "ts"} {
		if successByLang[l] < f.n/5 {
			t.Errorf("the %s executors ran %d of %d tasks, want at least a fifth", l, successByLang[l], f.n)
		}
	}
	if len(f.killed) == 0 || len(f.contAt) == 0 {
		t.Error("no fault was injected")
	}
}

// executorsOf lists the executors of some starts; f.mu held.
func (f *fleet) executorsOf(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, f.starts[i].Executor)
	}
	return out
}

// takenOverFrom reports whether a history shows the attempt taken over
// from the executor: a record naming it running, then another executor
// taking the attempt over.
func takenOverFrom(h []task.HistoryEntry, attempt int, executor string) bool {
	for k := 1; k < len(h); k++ {
		prev, cur := h[k-1].Event.Task, h[k].Event
		if prev.State == task.Running && prev.Executor == executor && prev.Attempt == attempt &&
			cur.Kind == task.KindTransition && cur.From == task.Running && cur.To == task.Running &&
			cur.Task.Executor != executor && cur.Task.Takeovers > prev.Takeovers {
			return true
		}
	}
	return false
}
