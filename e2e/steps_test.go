package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// ledgerRun is one run of a step's fn, as its side effect recorded it.
type ledgerRun struct {
	pid int
	at  time.Time
}

// readLedger reads the side effects of the steps' fns: task id → step →
// runs.
func readLedger(t *testing.T, path string) map[string]map[string][]ledgerRun {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]ledgerRun{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			t.Fatalf("ledger line %q", sc.Text())
		}
		pid, _ := strconv.Atoi(fields[2])
		ns, _ := strconv.ParseInt(fields[3], 10, 64)
		if out[fields[0]] == nil {
			out[fields[0]] = map[string][]ledgerRun{}
		}
		out[fields[0]][fields[1]] = append(out[fields[0]][fields[1]], ledgerRun{pid: pid, at: time.Unix(0, ns)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStepsKill9 runs multi-step tasks (demo.steps: each step's fn appends
// a line to a ledger file, outside AX) while executors and orchestrators
// are killed with SIGKILL, mostly between steps, and restarted; a fifth of
// the tasks also sleep durably in the middle. Every task must succeed with
// the right result; every step must be stored once; no fn may run after
// its step was stored; and a fn may have run more than once only on an
// executor that was killed (after the fn, before the store was
// acknowledged: the at-least-once window). AX_E2E_STEPS_TASKS sets the
// number of tasks (default 100; 1000 for the full proof).
func TestStepsKill9(t *testing.T) {
	n := envInt(t, "AX_E2E_STEPS_TASKS", 100)
	const steps = 5
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	ledger := filepath.Join(c.dir, "ledger.txt")
	rng := newRand(t)

	orchs := []*proc{c.startOrchestrator("orch-a", noBreakers...), c.startOrchestrator("orch-b", noBreakers...)}
	var mu sync.Mutex
	workers := map[string]*proc{} // live workers by id
	pidOf := map[string]int{}     // every worker id's pid
	killed := map[int]bool{}      // pids killed with -9
	next := 0
	startWorker := func() {
		next++
		id := fmt.Sprintf("w%d", next)
		p := c.startWorker(id, "--ack-wait", "2s", "--capacity", "16")
		mu.Lock()
		workers[id], pidOf[id] = p, p.pid()
		mu.Unlock()
	}
	startWorker()
	startWorker()
	warmUp(t, cl, "default")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ids := make([]string, n)
	specs := make([]task.Spec, n)
	for i := range n {
		p := demo.StepsParams{Steps: steps, Work: "100ms", Ledger: ledger}
		if i%5 == 0 {
			p.Nap = "1s"
		}
		s, err := task.New(demo.TypeSteps, p)
		if err != nil {
			t.Fatal(err)
		}
		s.ID = fmt.Sprintf("steps-%04d", i)
		s.MaxRetries = new(20) // kills in a row may fail an attempt (take-over limit): retries keep the steps
		ids[i], specs[i] = s.ID, s
	}
	if _, err := cl.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}

	// Faults until every task ended: a worker or an orchestrator killed
	// with -9 every 0.3–1.2 s and replaced at once (one orchestrator is
	// always up), while the handlers work between their steps.
	done := make(chan struct{})
	faultsDone := make(chan struct{})
	var workerKills, orchKills int
	go func() {
		defer close(faultsDone)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(300+rng.IntN(900)) * time.Millisecond):
			}
			// The first fault kills a worker, the second an orchestrator;
			// then two in three kill a worker.
			if i == 0 || i > 1 && rng.IntN(3) > 0 {
				mu.Lock()
				live := make([]string, 0, len(workers))
				for id := range workers {
					live = append(live, id)
				}
				slices.Sort(live)
				id := live[rng.IntN(len(live))]
				p := workers[id]
				delete(workers, id)
				killed[pidOf[id]] = true
				mu.Unlock()
				p.kill9()
				workerKills++
				startWorker()
			} else {
				o := orchs[rng.IntN(len(orchs))]
				o.kill9()
				orchKills++
				o.start()
			}
		}
	}()
	results := make(map[string]*task.Task, n)
	for _, id := range ids {
		got, err := cl.Wait(ctx, id)
		if err != nil {
			close(done)
			<-faultsDone
			t.Fatalf("wait %s: %v", id, err)
		}
		results[id] = got
	}
	close(done)
	<-faultsDone
	t.Logf("%d tasks of %d steps: %d worker kills, %d orchestrator kills", n, steps, workerKills, orchKills)

	runs := readLedger(t, ledger)
	executorPid := func(executor string) int {
		mu.Lock()
		defer mu.Unlock()
		return pidOf[executor]
	}
	wantSum := 0
	for i := 1; i <= steps; i++ {
		wantSum += i * i
	}
	var fnRuns, dupes, napped, resumed int
	for _, id := range ids {
		got := results[id]
		if got.State != task.Succeeded || !strings.Contains(string(got.Result), fmt.Sprintf(`"sum":%d`, wantSum)) {
			t.Errorf("%s ended %s (%s) with %s", id, got.State, got.Reason, got.Result)
			continue
		}
		stored := 0
		storers := map[string]bool{}
		for _, st := range got.Steps {
			if st.IsSleep() {
				napped++
				continue
			}
			stored++
			storers[st.Executor] = true
			rs := runs[id][st.Name]
			fnRuns += len(rs)
			if len(rs) == 0 {
				t.Errorf("%s %s: stored, but its fn never ran", id, st.Name)
				continue
			}
			if len(rs) > 1 {
				dupes += len(rs) - 1
			}
			storedBy := executorPid(st.Executor)
			ranOnStorer := 0
			for _, r := range rs {
				if r.at.After(st.At) {
					t.Errorf("%s %s: fn ran at %s on pid %d, after the step was stored at %s", id, st.Name,
						r.at.Format(time.RFC3339Nano), r.pid, st.At.Format(time.RFC3339Nano))
				}
				mu.Lock()
				wasKilled := killed[r.pid]
				mu.Unlock()
				switch {
				case r.pid == storedBy:
					ranOnStorer++
				case !wasKilled:
					t.Errorf("%s %s: fn ran on pid %d, which was not killed, and was stored by %s (pid %d)", id, st.Name, r.pid, st.Executor, storedBy)
				}
			}
			if ranOnStorer != 1 {
				t.Errorf("%s %s: fn ran %d times on %s, which stored it; want once", id, st.Name, ranOnStorer, st.Executor)
			}
		}
		if stored != steps {
			t.Errorf("%s: %d steps stored, want %d: %+v", id, stored, steps, got.Steps)
		}
		for name := range runs[id] {
			if _, ok := got.FindStep(name); !ok {
				t.Errorf("%s: fn of %s ran but no such step is stored", id, name)
			}
		}
		if len(storers) > 1 {
			resumed++
		}
	}
	t.Logf("%d steps stored, %d fn runs: %d ran again after a kill -9 between the fn and its store (the at-least-once window); %d tasks resumed on another executor after a kill (steps stored by several); %d durable sleeps",
		n*steps, fnRuns, dupes, resumed, napped)
}

// TestDurableSleepAcrossOrchestratorRestart: tasks sleep durably for 1 s
// to a few seconds (AX_E2E_SLEEP_MAX sets the longest in seconds: 60 for
// the full proof) between two steps, on a worker of capacity 2, while the
// only orchestrator is killed with -9 and restarted. Each wakes no
// earlier than its sleep's end, under the same attempt, its steps run
// once; the sleepers did not hold the worker's capacity (more sleep at
// once than it has slots). The figures of how late they woke are logged.
func TestDurableSleepAcrossOrchestratorRestart(t *testing.T) {
	n := envInt(t, "AX_E2E_SLEEP_TASKS", 20)
	maxSleep := envInt(t, "AX_E2E_SLEEP_MAX", 4)
	c := newCluster(t)
	c.startServer()
	_, cl := c.connect()
	ledger := filepath.Join(c.dir, "ledger.txt")
	rng := newRand(t)
	o := c.startOrchestrator("orch-1")
	c.startWorker("w1", "--ack-wait", "2s", "--capacity", "2")
	warmUp(t, cl, "default")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ids := make([]string, n)
	specs := make([]task.Spec, n)
	for i := range n {
		nap := time.Second + time.Duration(rng.Int64N(int64(time.Duration(maxSleep-1)*time.Second+1)))
		s, err := task.New(demo.TypeSteps, demo.StepsParams{Steps: 2, Nap: nap.Round(time.Millisecond).String(), NapAfter: 1, Ledger: ledger})
		if err != nil {
			t.Fatal(err)
		}
		s.ID = fmt.Sprintf("nap-%03d", i)
		s.MaxRetries = new(0)
		ids[i], specs[i] = s.ID, s
	}
	if _, err := cl.SubmitMany(ctx, specs); err != nil {
		t.Fatal(err)
	}
	// Kill the orchestrator once most tasks sleep, and keep it down a
	// second: the sleeps' timers are JetStream's, not its.
	eventually(t, 2*time.Minute, "tasks asleep", func() (bool, string) {
		asleep := 0
		for _, id := range ids {
			if got, err := cl.Get(ctx, id); err == nil && got.State == task.Retrying {
				asleep++
			}
		}
		return asleep >= n/2, fmt.Sprintf("%d of %d asleep", asleep, n)
	})
	o.kill9()
	time.Sleep(time.Second)
	o.start()

	type span struct{ from, to time.Time }
	var sleeps []span
	var late []time.Duration
	runs := readLedgerWhenDone(t, ctx, cl, ids, ledger)
	for _, id := range ids {
		got, err := cl.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != task.Succeeded || got.Attempt != 1 || len(got.Errors) != 0 {
			t.Errorf("%s ended %s in attempt %d (%s), errors %v", id, got.State, got.Attempt, got.Reason, got.Errors)
			continue
		}
		nap, ok := got.FindStep(task.SleepName(1))
		if !ok || nap.SleepUntil == nil {
			t.Errorf("%s: no sleep among its steps: %+v", id, got.Steps)
			continue
		}
		for _, name := range []string{"step-1", "step-2"} {
			if len(runs[id][name]) != 1 {
				t.Errorf("%s %s: fn ran %d times, want once", id, name, len(runs[id][name]))
			}
		}
		var woke time.Time
		for _, h := range history(t, cl, id) {
			if h.Event.From == task.Retrying && h.Event.To == task.Ready && strings.Contains(h.Event.Reason, task.SleepName(1)+" over") {
				woke = h.Event.At
			}
		}
		switch {
		case woke.IsZero():
			t.Errorf("%s: no wake in its history", id)
		case woke.Before(*nap.SleepUntil):
			t.Errorf("%s woke at %s, before its sleep's end %s", id, woke.Format(time.RFC3339Nano), nap.SleepUntil.Format(time.RFC3339Nano))
		default:
			late = append(late, woke.Sub(*nap.SleepUntil))
			sleeps = append(sleeps, span{nap.At, woke})
		}
	}
	// How many slept at once: more than the worker's 2 slots shows a
	// sleeping task holds none.
	most := 0
	for _, s := range sleeps {
		at := 0
		for _, o := range sleeps {
			if !o.from.After(s.from) && o.to.After(s.from) {
				at++
			}
		}
		most = max(most, at)
	}
	if most <= 2 {
		t.Errorf("at most %d tasks slept at once on a worker of capacity 2; sleeping tasks should free their slots", most)
	}
	slices.Sort(late)
	if len(late) > 0 {
		t.Logf("%d durable sleeps of 1–%d s, orchestrator killed -9 and down 1 s meanwhile; up to %d asleep at once on 2 slots; woke after their end by: median %s, p95 %s, max %s",
			len(late), maxSleep, most, late[len(late)/2].Round(time.Millisecond), late[len(late)*95/100].Round(time.Millisecond), late[len(late)-1].Round(time.Millisecond))
	}
}

// readLedgerWhenDone waits for every task to end and reads the ledger.
func readLedgerWhenDone(t *testing.T, ctx context.Context, cl *sdk.Client, ids []string, ledger string) map[string]map[string][]ledgerRun {
	t.Helper()
	for _, id := range ids {
		if _, err := cl.Wait(ctx, id); err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
	}
	return readLedger(t, ledger)
}
