//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// clusterPrefix starts the id of every task of the cluster workload.
const clusterPrefix = "cl"

// fanInWidth is the width of the wide fan-ins: more than 16 upstreams
// makes the orchestrator count them with fan-in markers.
const fanInWidth = 20

// clusterWorkload is the cluster test's generated work, in waves submitted
// over the fault phase.
type clusterWorkload struct {
	tasks map[string]*planned
	order []string
	waves []clusterWave
	// splits are the sharded parents and how many shards each plans.
	splits map[string]demo.Params
	kinds  map[string]int // units per kind, for the summary
}

// clusterWave is one batch of submissions.
type clusterWave struct {
	singles []task.Spec
	graphs  [][]task.Spec
	// late tasks depend on tasks of earlier waves; each is submitted on its
	// own once all its upstreams are seen to exist.
	late []task.Spec
}

type clusterBuilder struct {
	rng *rand.Rand
	w   *clusterWorkload
}

func (b *clusterBuilder) add(id, typ string, p demo.Params, deps ...string) task.Spec {
	p.Label = id
	s, err := task.New(typ, p)
	if err != nil {
		panic(err)
	}
	s.ID = clusterPrefix + "-" + id
	s.DependsOn = deps
	s.Priority = new(b.rng.IntN(task.Levels))
	// Four tenants share the cluster fairly, each limited to
	// clusterKeyLimit tasks at once (clusterOrchFlags).
	tenant := "tenant." + strconv.Itoa(b.rng.IntN(4))
	s.FairnessKey, s.ConcurrencyKey = tenant, tenant
	if typ == demo.TypeFail {
		s.MaxRetries = new(1)
	}
	b.w.tasks[s.ID] = &planned{spec: s, failTimes: p.FailTimes}
	b.w.order = append(b.w.order, s.ID)
	return s
}

// work returns a short task of a random kind (noop, sleep or flaky) that
// succeeds, possibly after failing attempts.
func (b *clusterBuilder) work(id string, deps ...string) task.Spec {
	switch r := b.rng.IntN(10); {
	case r < 5:
		return b.add(id, demo.TypeNoop, demo.Params{}, deps...)
	case r < 8:
		return b.add(id, demo.TypeSleep, demo.Params{Sleep: b.sleep()}, deps...)
	default:
		return b.add(id, demo.TypeFlaky, demo.Params{FailTimes: b.rng.IntN(3)}, deps...)
	}
}

func (b *clusterBuilder) sleep() string {
	return (time.Duration(5+b.rng.IntN(46)) * time.Millisecond).String()
}

// newClusterWorkload generates at least n tasks (not counting shards) in
// the given number of waves: chains of 5, fan-ins of 20 upstreams, sharded
// jobs with a dependent, failing graphs, late dependents, and independent
// noop, sleep, flaky and always-failing tasks.
func newClusterWorkload(rng *rand.Rand, n, waves int) *clusterWorkload {
	w := &clusterWorkload{tasks: make(map[string]*planned), splits: make(map[string]demo.Params), kinds: make(map[string]int)}
	b := &clusterBuilder{rng: rng, w: w}
	w.waves = make([]clusterWave, waves)
	single := func(kind string, s task.Spec) {
		wv := &w.waves[rng.IntN(waves)]
		wv.singles = append(wv.singles, s)
		w.kinds[kind]++
	}
	// waveOf remembers where each graph task went, for late dependents.
	waveOf := make(map[string]int)
	addGraph := func(kind string, g []task.Spec) {
		k := rng.IntN(waves)
		w.waves[k].graphs = append(w.waves[k].graphs, g)
		for _, s := range g {
			waveOf[s.ID] = k
		}
		w.kinds[kind]++
	}

	for i := range max(1, n/100) { // chains of 5: 5 %
		g := "chain" + strconv.Itoa(i)
		var specs []task.Spec
		for k := range 5 {
			var deps []string
			if k > 0 {
				deps = []string{specs[k-1].ID}
			}
			specs = append(specs, b.work(g+"-"+strconv.Itoa(k), deps...))
		}
		addGraph("chain", specs)
	}
	for i := range max(1, n/200) { // fan-ins of 20 → 1: 10.5 %
		g := "fanin" + strconv.Itoa(i)
		var specs []task.Spec
		var ups []string
		for k := range fanInWidth {
			s := b.work(g + "-up" + strconv.Itoa(k))
			specs = append(specs, s)
			ups = append(ups, s.ID)
		}
		specs = append(specs, b.add(g+"-down", demo.TypeNoop, demo.Params{}, ups...))
		addGraph("fan-in", specs)
	}
	for i := range max(2, n/800) { // sharded jobs, each with a dependent
		g := "split" + strconv.Itoa(i)
		p := demo.Params{Shards: 20 + rng.IntN(21), Size: 5}
		parent := b.add(g, demo.TypeSplit, p)
		parent.Shardable = true
		if i%2 == 1 {
			parent.MaxParallelShards = 8
		}
		b.w.tasks[parent.ID].spec = parent
		w.splits[parent.ID] = p
		addGraph("sharded", []task.Spec{parent, b.add(g+"-after", demo.TypeNoop, demo.Params{}, parent.ID)})
	}
	var failRoots []string
	for i := range max(1, n/400) { // f (fails) → x → y; z depends on f and an ok task
		g := "fg" + strconv.Itoa(i)
		f := b.add(g+"-f", demo.TypeFail, demo.Params{})
		x := b.add(g+"-x", demo.TypeNoop, demo.Params{}, f.ID)
		y := b.add(g+"-y", demo.TypeNoop, demo.Params{}, x.ID)
		ok := b.work(g + "-ok")
		z := b.add(g+"-z", demo.TypeNoop, demo.Params{}, f.ID, ok.ID)
		addGraph("failing graph", []task.Spec{f, x, y, ok, z})
		failRoots = append(failRoots, f.ID)
	}
	for i := range n * 15 / 100 { // flaky: 15 %
		single("flaky", b.add("flaky-"+strconv.Itoa(i), demo.TypeFlaky, demo.Params{FailTimes: rng.IntN(3)}))
	}
	for i := range max(1, n*2/100) { // always failing: 2 %
		single("fail", b.add("fail-"+strconv.Itoa(i), demo.TypeFail, demo.Params{}))
	}
	for i := range n * 20 / 100 { // sleep: 20 %
		single("sleep", b.add("sleep-"+strconv.Itoa(i), demo.TypeSleep, demo.Params{Sleep: b.sleep()}))
	}
	// Late dependents (3 %) in waves ≥ 2, on graph tasks of earlier waves:
	// one that succeeds, or a failing root (then cancelled).
	var early [][]string // early[k]: graph tasks of wave k that succeed
	for range waves {
		early = append(early, nil)
	}
	for _, id := range w.order {
		if k, ok := waveOf[id]; ok && w.tasks[id].spec.Type != demo.TypeFail && w.tasks[id].spec.Type != demo.TypeSplit {
			early[k] = append(early[k], id)
		}
	}
	if waves > 2 {
		for i := range n * 3 / 100 {
			k := 2 + rng.IntN(waves-2)
			up := early[rng.IntN(k-1)]
			if len(up) == 0 {
				continue
			}
			deps := []string{up[rng.IntN(len(up))]}
			if i%5 == 0 && len(failRoots) > 0 {
				deps = []string{failRoots[rng.IntN(len(failRoots))]}
				if waveOf[deps[0]] >= k-1 {
					continue
				}
			}
			s := b.add("late-"+strconv.Itoa(i), demo.TypeNoop, demo.Params{}, deps...)
			w.waves[k].late = append(w.waves[k].late, s)
			w.kinds["late"]++
		}
	}
	for i := 0; len(w.tasks) < n; i++ { // noop: the rest (about 35 %)
		single("noop", b.add("noop-"+strconv.Itoa(i), demo.TypeNoop, demo.Params{}))
	}
	for k := range w.waves {
		rng.Shuffle(len(w.waves[k].singles), func(i, j int) {
			w.waves[k].singles[i], w.waves[k].singles[j] = w.waves[k].singles[j], w.waves[k].singles[i]
		})
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

// shards is how many shard tasks the sharded jobs plan.
func (w *clusterWorkload) shards() int {
	n := 0
	for _, p := range w.splits {
		n += p.Shards
	}
	return n
}

func (w *clusterWorkload) summary() string {
	byType := map[string]int{}
	withDeps := 0
	for _, p := range w.tasks {
		byType[p.spec.Type]++
		if len(p.spec.DependsOn) > 0 {
			withDeps++
		}
	}
	return fmt.Sprintf("%d tasks + %d shards in %d waves: %v; units %v; %d tasks with dependencies",
		len(w.tasks), w.shards(), len(w.waves), byType, w.kinds, withDeps)
}

// submitter submits through several SDK clients (one per NATS node),
// moving to the next client when a call fails, and records every id whose
// submission JetStream acknowledged.
type submitter struct {
	t       *testing.T
	clients []*sdk.Client
	rr      atomic.Uint64

	stop chan struct{} // closed when the test ends

	mu       sync.Mutex
	acked    map[string]time.Time
	problems []string
	retries  int
}

// errStopped ends a submission when the test ends first.
var errStopped = errors.New("the test ended")

func newSubmitter(t *testing.T, clients []*sdk.Client) *submitter {
	s := &submitter{t: t, clients: clients, acked: make(map[string]time.Time), stop: make(chan struct{})}
	t.Cleanup(func() { close(s.stop) })
	return s
}

// retried is how many calls failed and were tried again.
func (s *submitter) retried() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries
}

// opTimeout bounds one call; a paused or partitioned node makes calls hang
// or fail, and the next call goes to another node.
const opTimeout = 5 * time.Second

// try runs op on the clients in rotation until it succeeds, is rejected or
// timeout passes.
func (s *submitter) try(timeout time.Duration, op func(ctx context.Context, cl *sdk.Client) error) error {
	deadline := time.Now().Add(timeout)
	for {
		cl := s.clients[s.rr.Add(1)%uint64(len(s.clients))]
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := op(ctx, cl)
		cancel()
		if err == nil {
			return nil
		}
		var rej *sdk.RejectedError
		if errors.As(err, &rej) || time.Now().After(deadline) {
			return err
		}
		s.mu.Lock()
		s.retries++
		s.mu.Unlock()
		select {
		case <-s.stop:
			return errStopped
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *submitter) ack(ids ...string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if _, ok := s.acked[id]; !ok {
			s.acked[id] = now
		}
	}
}

func (s *submitter) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

// ackedIDs returns the acknowledged ids.
func (s *submitter) ackedIDs() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.acked))
	for id, at := range s.acked {
		out[id] = at
	}
	return out
}

// submitTimeout is how long one submission is retried across nodes.
const submitTimeout = 3 * time.Minute

// run submits the waves evenly over span, each wave's independent tasks in
// pipelined chunks, its graphs one publish each, and its late tasks once
// their upstreams exist. It returns when everything was submitted (or given
// up on, which is recorded as a problem).
func (s *submitter) run(w *clusterWorkload, span time.Duration) {
	start := time.Now()
	for k, wv := range w.waves {
		select {
		case <-s.stop:
			return
		case <-time.After(time.Until(start.Add(span * time.Duration(k) / time.Duration(len(w.waves))))):
		}
		var wg sync.WaitGroup
		for chunk := range slices.Chunk(wv.singles, 200) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := s.try(submitTimeout, func(ctx context.Context, cl *sdk.Client) error {
					_, err := cl.SubmitMany(ctx, slices.Clone(chunk))
					return err
				})
				if err != nil {
					s.problem("submit %d tasks from %s: %v", len(chunk), chunk[0].ID, err)
					return
				}
				ids := make([]string, len(chunk))
				for i, sp := range chunk {
					ids[i] = sp.ID
				}
				s.ack(ids...)
			}()
		}
		for _, g := range wv.graphs {
			err := s.try(submitTimeout, func(ctx context.Context, cl *sdk.Client) error {
				_, err := cl.SubmitGraph(ctx, slices.Clone(g))
				return err
			})
			if err != nil {
				s.problem("submit graph of %s: %v", g[0].ID, err)
				continue
			}
			ids := make([]string, len(g))
			for i, sp := range g {
				ids[i] = sp.ID
			}
			s.ack(ids...)
		}
		wg.Wait()
		for _, l := range wv.late {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.submitLate(l)
			}()
		}
		wg.Wait()
	}
}

// submitLate waits until the upstreams of a late task exist (its
// submission would rightly be rejected before) and submits it.
func (s *submitter) submitLate(l task.Spec) {
	for _, d := range l.DependsOn {
		err := s.try(submitTimeout, func(ctx context.Context, cl *sdk.Client) error {
			_, err := cl.Get(ctx, d)
			return err
		})
		if err != nil {
			s.problem("late task %s: its upstream %s does not exist after %s: %v", l.ID, d, submitTimeout, err)
			return
		}
	}
	err := s.try(submitTimeout, func(ctx context.Context, cl *sdk.Client) error {
		_, err := cl.Submit(ctx, l)
		return err
	})
	if err != nil {
		s.problem("submit late task %s: %v", l.ID, err)
		return
	}
	s.ack(l.ID)
}
