package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// An orchestrator killed with SIGKILL leaves the messages it held unacked;
// JetStream redelivers them after the orchestrator consumers' ack wait (1m,
// not settable from the CLI), so a run with kills takes at least that long.
// A server restart can do the same to messages whose ack it did not get.
const (
	allTerminalTimeout        = 3 * time.Minute
	allTerminalTimeoutRestart = 2 * time.Minute
)

// noBreakers disables the per-type circuit breakers: the workloads fail
// attempts on purpose, and a breaker holding a type's tasks for its
// cooldown is not what these tests are about.
var noBreakers = []string{"--breaker-threshold", "1"}

// TestOrchestratorKill9 runs 2,000 tasks (independent, DAGs, flaky, failing)
// while the orchestrator is killed with SIGKILL three times, with two
// orchestrators running at once for part of the run, and checks every
// task's history.
func TestOrchestratorKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	rng := newRand(t)
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	o1 := c.startOrchestrator("orch-1", noBreakers...)
	c.startWorker("worker-1", "--ack-wait", "5s", "--capacity", "8", "--capabilities", "default,w1")
	c.startWorker("worker-2", "--ack-wait", "5s", "--capacity", "8", "--capabilities", "default,alt")
	warmUp(t, cl, "w1", "alt")

	m := mix{graphs: 180, failGraphs: 4, noop: 300, sleep: 300, flaky: 306, fail: 4, late: 40, fanOut: 100,
		failingFlaky: 0.4, sleepMin: 5 * time.Millisecond, sleepMax: 80 * time.Millisecond}
	w := newWorkload(rng, "o", m, 4)
	if n := len(w.tasks); n != 2000 {
		t.Fatalf("workload has %d tasks, want 2000", n)
	}
	t.Logf("workload: %s", w.summary())
	kill := func(p *proc) func() {
		return func() {
			held := inHand(js)
			p.kill9()
			t.Logf("killed %s (pid %d) with -9; the orchestrators held %s; %d of %d tasks terminal", p.name, p.pid(), held, progress(js, w), len(w.tasks))
		}
	}

	duringWave(t, rng, cl, w.waves[0], kill(o1))
	// Two orchestrators share the work from here until orch-2 is killed.
	o1b := c.startOrchestrator("orch-1b", noBreakers...)
	o2 := c.startOrchestrator("orch-2", noBreakers...)
	duringWave(t, rng, cl, w.waves[1], kill(o2))
	duringWave(t, rng, cl, w.waves[2], kill(o1b))
	c.startOrchestrator("orch-3", noBreakers...)
	if err := submitWave(cl, w.waves[3]); err != nil {
		t.Fatal(err)
	}
	submitLate(t, cl, w, allTerminalTimeout)

	waitAllTerminal(t, js, w, allTerminalTimeout)
	checkWorkload(t, cl, js, w)
}

// TestServerRestart runs 500 tasks while the NATS server is stopped with
// SIGTERM once and killed with SIGKILL once, each time restarted on the same
// port and store; orchestrator and workers reconnect on their own.
//
// A SIGKILL of the server process loses no acknowledged message even with
// the default fsync policy (periodic fsync, not sync_interval: always): for
// a single-replica stream JetStream writes each message to its block file
// (write(2), "flush in place") before it acknowledges the publish, and that
// write lives in the OS page cache, which survives the process. Only a
// crash of the OS or the machine could lose it (see --sync-always). What a
// SIGKILL can lose is consumer state, which is flushed asynchronously:
// deliveries and acks of the last ~100ms are forgotten, so those messages
// come back, as if never delivered. AX must absorb that.
func TestServerRestart(t *testing.T) { serverRestart(t, nil) }

// TestServerRestartGroupCommit is TestServerRestart with group commit on
// (`ax topology --group-commit`): the orchestrator's record writes and the
// producer's larger submission batches go as atomic batches, some of them
// in flight when the server dies; a batch is stored whole or not at all,
// and every task's history is checked as before.
func TestServerRestartGroupCommit(t *testing.T) {
	metrics := "127.0.0.1:" + strconv.Itoa(freePort(t))
	serverRestart(t, []string{"--group-commit"}, "--metrics-addr", metrics)
	// Every record write went through the orchestrator's committer (each
	// counted by how it was published: internal/groupcommit's and the
	// orchestrator's tests show the batches themselves).
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var writes float64
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, "ax_record_writes_total{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			writes += n
		}
	}
	if writes < 1000 {
		t.Fatalf("the orchestrator counts %.0f record writes through group commit; want every one of the 500 tasks' (more than 1,000)", writes)
	}
	t.Logf("%.0f record writes through group commit", writes)
}

func serverRestart(t *testing.T, topologyArgs []string, orchestratorArgs ...string) {
	c := newCluster(t)
	c.startServer(topologyArgs...)
	rng := newRand(t)
	nc, cl := c.connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.startOrchestrator("orch-1", append(slices.Clone(noBreakers), orchestratorArgs...)...)
	c.startWorker("worker-1", "--ack-wait", "3s", "--capacity", "8", "--capabilities", "default,w1")
	c.startWorker("worker-2", "--ack-wait", "3s", "--capacity", "8", "--capabilities", "default,alt")
	warmUp(t, cl, "w1", "alt")

	m := mix{graphs: 40, failGraphs: 2, noop: 50, sleep: 80, flaky: 57, fail: 3, late: 10, fanOut: 50,
		failingFlaky: 0.4, sleepMin: 20 * time.Millisecond, sleepMax: 300 * time.Millisecond}
	w := newWorkload(rng, "s", m, 3)
	if n := len(w.tasks); n != 500 {
		t.Fatalf("workload has %d tasks, want 500", n)
	}
	t.Logf("workload: %s", w.summary())

	restart := func(kill9 bool) func() {
		return func() {
			held := inHand(js)
			c.restartServer(kill9)
			how := "SIGTERM"
			if kill9 {
				how = "kill -9"
			}
			t.Logf("restarted the server after %s; orchestrator held %s", how, held)
		}
	}
	duringWave(t, rng, cl, w.waves[0], restart(false))
	waitConnected(t, nc)
	t.Logf("%d of %d tasks terminal", progress(js, w), len(w.tasks))
	duringWave(t, rng, cl, w.waves[1], restart(true))
	waitConnected(t, nc)
	t.Logf("%d of %d tasks terminal", progress(js, w), len(w.tasks))
	if err := submitWave(cl, w.waves[2]); err != nil {
		t.Fatal(err)
	}
	submitLate(t, cl, w, allTerminalTimeoutRestart)

	waitAllTerminal(t, js, w, allTerminalTimeoutRestart)
	checkWorkload(t, cl, js, w)
}

// TestExecutorKill9 kills a worker in the middle of a task: another worker
// takes the task over once its lease (ack wait) runs out, and it succeeds
// exactly once. A healthy handler that runs longer than the ack wait keeps
// its lease by heart-beating and is not taken over.
func TestExecutorKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	c.startOrchestrator("orch-1")
	a := c.startWorker("worker-a", "--ack-wait", "2s")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sleepTask := func(id, d string) string {
		t.Helper()
		s, err := task.New(demo.TypeSleep, demo.Params{Sleep: d, Label: id})
		if err != nil {
			t.Fatal(err)
		}
		s.ID = id
		if _, err := cl.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		return id
	}

	victim := sleepTask("takeover", "4s")
	eventually(t, 30*time.Second, "worker-a to run "+victim, func() (bool, string) {
		got, err := cl.Get(ctx, victim)
		if err != nil {
			return false, err.Error()
		}
		return got.State == task.Running && got.Executor == "worker-a", string(got.State) + " on " + got.Executor
	})
	a.kill9()
	c.startWorker("worker-b", "--ack-wait", "2s")
	healthy := sleepTask("healthy-long", "6s")

	for _, id := range []string{victim, healthy} {
		got, err := cl.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
		if got.State != task.Succeeded || got.Executor != "worker-b" || got.Attempt != 1 || len(got.Errors) != 0 {
			t.Errorf("%s ended %s on %q, attempt %d, errors %v; want succeeded on worker-b in attempt 1",
				id, got.State, got.Executor, got.Attempt, got.Errors)
		}
		var res struct {
			Attempt int `json:"executor_attempt"`
		}
		if err := json.Unmarshal(got.Result, &res); err != nil || res.Attempt != 1 {
			t.Errorf("%s result %s (%v), want executor_attempt 1", id, got.Result, err)
		}
	}

	h := history(t, cl, victim)
	if n := countTransitions(h, task.Ready, task.Running); n != 1 {
		t.Errorf("%s: %d ready->running, want 1 (worker-a's running mark)\n%s", victim, n, describe(h))
	}
	if n := countTransitions(h, task.Running, task.Running); n != 1 {
		t.Errorf("%s: %d running->running, want 1 (worker-b's takeover)\n%s", victim, n, describe(h))
	}
	if n := countAttemptEnds(h, task.Succeeded); n != 1 {
		t.Errorf("%s: %d attempts succeeded, want 1\n%s", victim, n, describe(h))
	}
	var claimExec string
	for _, r := range h {
		ev := r.Event
		switch {
		case ev.From == task.Ready && ev.To == task.Running:
			claimExec = ev.Task.ExecutionID
			// Written by the orchestrator: executors write no records.
			if ev.Actor != "orch-1" || ev.Task.Executor != "worker-a" {
				t.Errorf("%s: marked running by %s (executor %s), want orch-1 marking worker-a", victim, ev.Actor, ev.Task.Executor)
			}
		case ev.From == task.Running && ev.To == task.Running:
			if ev.Actor != "orch-1" || ev.Task.Executor != "worker-b" ||
				!strings.Contains(ev.Reason, "taken over by worker-b from worker-a") {
				t.Errorf("%s: takeover by %s (executor %s, reason %q), want worker-b taking over from worker-a",
					victim, ev.Actor, ev.Task.Executor, ev.Reason)
			}
			if ev.Task.ExecutionID != claimExec || ev.Task.Attempt != 1 {
				t.Errorf("%s: takeover changed the execution (%s, attempt %d), want %s, attempt 1",
					victim, ev.Task.ExecutionID, ev.Task.Attempt, claimExec)
			}
		}
	}

	h = history(t, cl, healthy)
	if n := countTransitions(h, task.Ready, task.Running); n != 1 {
		t.Errorf("%s: %d ready->running, want 1\n%s", healthy, n, describe(h))
	}
	if n := countTransitions(h, task.Running, task.Running); n != 0 {
		t.Errorf("%s: taken over %d times although its handler was heart-beating\n%s", healthy, n, describe(h))
	}
	if n := countAttemptEnds(h, task.Succeeded); n != 1 {
		t.Errorf("%s: %d attempts succeeded, want 1\n%s", healthy, n, describe(h))
	}
}

// TestServerAndExecutorKill9: the NATS server and the worker running a task
// die together (a machine losing power, minus the page cache). The
// consumer's record of the task's delivery may not have reached the disk
// (consumer state is flushed asynchronously, every 100ms at most), so the
// dispatch comes back to the next worker as if never delivered
// (NumDelivered 1). That worker must still take the task over: nobody else
// runs it, and nothing else would ever make it run.
//
// A stream of small tasks on the same consumer keeps its state being
// written, which makes it likely that the victim's delivery is the part
// not yet flushed when the server dies.
func TestServerAndExecutorKill9(t *testing.T) {
	c := newCluster(t)
	c.startServer()
	nc, cl := c.connect()
	c.startOrchestrator("orch-1")
	a := c.startWorker("worker-a", "--ack-wait", "2s", "--capacity", "64")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Know the moment the victim is claimed: its history is published on
	// ax.task.<id>, which a core subscription sees as it is stored.
	const victim = "victim"
	claimed := make(chan struct{}, 1)
	sub, err := nc.Subscribe(subject.TaskHistory(victim), func(m *nats.Msg) {
		var ev task.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.To == task.Running {
			select {
			case claimed <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() { // small tasks at the victim's priority, until the crash
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			s, _ := task.New(demo.TypeNoop, nil)
			s.ID = fmt.Sprintf("filler-%d", i)
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			_, _ = cl.Submit(sctx, s)
			scancel()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	v, err := task.New(demo.TypeSleep, demo.Params{Sleep: "3s", Label: victim})
	if err != nil {
		t.Fatal(err)
	}
	v.ID = victim
	if _, err := cl.Submit(ctx, v); err != nil {
		t.Fatal(err)
	}
	select {
	case <-claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("the victim was not claimed within 30s")
	}
	c.server.kill9()
	a.kill9()
	close(stop)
	<-stopped
	c.server.start()
	if got := c.waitServerURL(); got != c.url {
		t.Fatalf("restarted server at %s, want %s", got, c.url)
	}
	waitConnected(t, nc)
	c.startWorker("worker-b", "--ack-wait", "2s")

	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	got, err := cl.Wait(wctx, victim)
	h := history(t, cl, victim)
	if err != nil {
		now, _ := cl.Get(ctx, victim)
		js, _ := jetstream.New(nc)
		t.Fatalf("%s did not end within 20s of worker-b's start (%v); it is %s, run by nobody:\n%s\n%s",
			victim, err, now.State, describe(h), streamState(js))
	}
	// The killed server may have lost worker-a's claim (it had not flushed
	// it): then worker-b claims the task afresh instead of taking it over.
	takeovers := 0
	for _, ev := range h {
		if ev.Event.To == task.Running && ev.Event.Task.Executor == "worker-a" {
			takeovers = 1
		}
	}
	if got.State != task.Succeeded || got.Executor != "worker-b" || countTransitions(h, task.Running, task.Running) != takeovers ||
		countAttemptEnds(h, task.Succeeded) != 1 {
		t.Errorf("%s ended %s on %s, want succeeded after worker-b took it over (or claimed it, if the server lost worker-a's claim)\n%s",
			victim, got.State, got.Executor, describe(h))
	}
}

// history reads a task's history through the SDK.
func history(t *testing.T, cl *sdk.Client, id string) []store.Revisioned {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := cl.History(ctx, id)
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	return h
}

// countTransitions counts a history's transitions from → to.
// countAttemptEnds counts the ends of attempts (task.Event.EndsAttempt)
// into one of the states given (any state if none).
func countAttemptEnds(h []store.Revisioned, into ...task.State) int {
	n := 0
	for _, r := range h {
		if r.Event.EndsAttempt() && (len(into) == 0 || slices.Contains(into, r.Event.To)) {
			n++
		}
	}
	return n
}

func countTransitions(h []store.Revisioned, from, to task.State) int {
	n := 0
	for _, r := range h {
		if r.Event.Kind == task.KindTransition && r.Event.From == from && r.Event.To == to {
			n++
		}
	}
	return n
}
