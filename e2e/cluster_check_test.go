//go:build unix

package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// stall is the longest time a task went without a new event while
// unfinished.
type stall struct {
	id    string
	state task.State
	d     time.Duration
	since time.Time
	// net is d less the times a stream the probe reads was out
	// (leaderProbe): the part of the stall the store does not explain.
	net time.Duration
	// netReady is net, for a ready task, also less the times its
	// level's ready consumer had no leader (executors cannot pull it).
	netReady time.Duration
}

func (s stall) String() string {
	if s.id == "" {
		return "none"
	}
	return fmt.Sprintf("%s (%s in %s from %s; %s net of store outages, %s also of its ready consumer's)", s.d.Round(time.Millisecond), s.id, s.state,
		s.since.Format("15:04:05.000"), s.net.Round(time.Millisecond), s.netReady.Round(time.Millisecond))
}

// clusterFindings are the results of checking every history.
type clusterFindings struct {
	tasks, shards, events int
	states                map[task.State]int
	stuck                 []string // existing tasks not in a terminal state
	missing               []string // acknowledged but without a history
	violations            int
	takeovers, deadLeters int
	// longestRaw: any unfinished task without an event (waiting on
	// unfinished upstreams included); longest: not counting a wait for
	// upstreams or shards that had not ended yet.
	longestRaw, longest stall
	// longestNet: as longest, ranked by the stall net of store outages;
	// longestNetReady, by netReady.
	longestNet, longestNetReady stall
	top                         []stall
	byState                     map[task.State]stall // longest per state, as longest
	// slotWait: the longest a ready task waited for a slot of its
	// concurrency key (its last event "held: concurrency limit of key
	// … reached"), which longest leaves out: a key at its limit holds its
	// tasks back by design, for as long as its running tasks take.
	slotWait stall
}

// isClusterTask reports whether an id is the workload's (submitted or a
// shard of a submitted task).
func isClusterTask(id string) bool { return strings.HasPrefix(id, clusterPrefix+"-") }

// checkClusterHistories checks the invariants of every workload task's
// history; now ends the stall of tasks still unfinished. pf's outages are
// the spans when a probed stream was out (sorted, disjoint), which each
// stall's net leaves out; its readyOutages add a level's ready consumer's
// for ready tasks (netReady).
func checkClusterHistories(t *testing.T, w *clusterWorkload, acked map[string]time.Time, all map[string][]store.Revisioned,
	dlq map[string]int, now time.Time, pf probeFigures) *clusterFindings {
	outages := pf.outages
	t.Helper()
	f := &clusterFindings{states: make(map[task.State]int), byState: make(map[task.State]stall)}
	fail := func(id, format string, args ...any) {
		f.violations++
		if f.violations <= 40 {
			t.Errorf("task %s: %s\n%s", id, fmt.Sprintf(format, args...), describe(all[id]))
		}
	}

	final := make(map[string]task.Task)
	endedAt := make(map[string]time.Time)  // first terminal event
	succeededAt := make(map[string]uint64) // revision of the transition into succeeded
	shardsOf := make(map[string][]string)  // parent → its shards
	var ids []string
	for id, h := range all {
		if !isClusterTask(id) || len(h) == 0 {
			continue
		}
		ids = append(ids, id)
		final[id] = h[len(h)-1].Event.Task
		for _, r := range h {
			if r.Event.Kind == task.KindTransition && r.Event.To.Terminal() && endedAt[id].IsZero() {
				endedAt[id] = r.Event.At
			}
			if r.Event.Kind == task.KindTransition && r.Event.To == task.Succeeded {
				succeededAt[id] = r.Revision
			}
		}
		if p := final[id].Parent; p != "" {
			shardsOf[p] = append(shardsOf[p], id)
		}
	}
	sort.Strings(ids)

	for id := range acked {
		if len(all[id]) == 0 {
			f.missing = append(f.missing, id)
		}
	}
	sort.Strings(f.missing)

	for _, id := range ids {
		h := all[id]
		fin := final[id]
		f.events += len(h)
		f.states[fin.State]++
		p, submitted := w.tasks[id]
		if submitted {
			f.tasks++
		} else if fin.Parent != "" && w.splits[fin.Parent].Shards > 0 {
			f.shards++
		} else {
			fail(id, "exists but was never submitted and is no shard of a submitted task")
		}
		if !fin.State.Terminal() {
			f.stuck = append(f.stuck, id)
		}

		var (
			creations, succeeded, released, takeovers int
			releaseRev                                uint64
			prev                                      task.State
		)
		for i, r := range h {
			ev := r.Event
			if ev.Task.ID != id {
				fail(id, "event at %d holds the record of %q", r.Revision, ev.Task.ID)
			}
			if ev.Task.State != ev.To {
				fail(id, "event at %d: record state %s, event to %s", r.Revision, ev.Task.State, ev.To)
			}
			if i == 0 && (ev.Kind != task.KindTransition || ev.From != "") {
				fail(id, "first event is not a creation: %s %q -> %s", ev.Kind, ev.From, ev.To)
			}
			if i > 0 && ev.From != prev {
				fail(id, "event at %d starts from %s, but the task was %s", r.Revision, ev.From, prev)
			}
			prev = ev.To
			switch ev.Kind {
			case task.KindTransition:
				if !task.CanTransition(ev.From, ev.To) {
					fail(id, "transition %q -> %s at %d is not allowed", ev.From, ev.To, r.Revision)
				}
			default:
				if ev.From != ev.To {
					fail(id, "%s event at %d changes the state %s -> %s", ev.Kind, r.Revision, ev.From, ev.To)
				}
				continue
			}
			switch {
			case ev.From == "":
				creations++
			case ev.To == task.Succeeded:
				succeeded++
			case ev.From == task.Waiting && ev.To == task.Ready:
				released++
				releaseRev = r.Revision
			case ev.From == task.Running && ev.To == task.Running:
				takeovers++
			}
		}
		f.takeovers += takeovers
		if creations != 1 {
			fail(id, "%d creation events, want 1", creations)
		}
		if succeeded > 1 {
			fail(id, "%d transitions into succeeded, want at most 1", succeeded)
		}
		if n := dlq[id]; fin.State == task.Failed && n != 1 || fin.State != task.Failed && n != 0 {
			fail(id, "ended %s with %d dead letters; want exactly one dead letter per failed task", fin.State, n)
		}
		if !submitted {
			continue
		}
		if fin.State.Terminal() && fin.State != p.want {
			fail(id, "ended %s (%s), want %s", fin.State, fin.Reason, p.want)
		}
		// A dependent is released once, after all its upstreams succeeded,
		// and never when one of them did not succeed.
		if deps := p.spec.DependsOn; len(deps) > 0 && fin.State.Terminal() {
			allSucceeded := true
			for _, d := range deps {
				if final[d].State != task.Succeeded {
					allSucceeded = false
				}
			}
			switch {
			case allSucceeded && released != 1:
				fail(id, "%d waiting->ready transitions with all upstreams succeeded, want 1", released)
			case allSucceeded:
				for _, d := range deps {
					if releaseRev < succeededAt[d] {
						fail(id, "released at %d before upstream %s succeeded at %d", releaseRev, d, succeededAt[d])
					}
				}
			case released != 0:
				fail(id, "%d waiting->ready transitions although an upstream did not succeed", released)
			}
		}
		if sp, ok := w.splits[id]; ok && fin.State == task.Succeeded {
			n := sp.Shards * sp.Size
			want := demo.SplitResult{Sum: n * (n - 1) / 2, Shards: sp.Shards, Succeeded: sp.Shards}
			var got demo.SplitResult
			if err := json.Unmarshal(fin.Result, &got); err != nil || got != want {
				fail(id, "aggregate %s, want %+v", fin.Result, want)
			}
			if len(shardsOf[id]) != sp.Shards {
				fail(id, "has %d shard tasks, want %d", len(shardsOf[id]), sp.Shards)
			}
		}
	}
	for id, n := range dlq {
		if isClusterTask(id) && len(all[id]) == 0 {
			t.Errorf("%d dead letters for %s, which does not exist", n, id)
			f.violations++
		}
	}
	f.deadLeters = len(dlq)

	// Stalls: the gaps between a task's events while it was unfinished,
	// and from its last event to now if it still is. A waiting task's gap
	// counts only from the moment its last upstream (or shard) ended.
	upstreams := func(id string, at task.Task) []string {
		switch {
		case at.Phase == task.PhaseShards:
			return shardsOf[id]
		case at.Parked:
			// A parked shard waits for the shard max_parallel_shards
			// before it to end.
			if p, ok := w.tasks[at.Parent]; ok && p.spec.MaxParallelShards > 0 && at.ShardIndex >= p.spec.MaxParallelShards {
				return []string{task.ShardID(at.Parent, at.ShardIndex-p.spec.MaxParallelShards)}
			}
		}
		return at.DependsOn
	}
	for _, id := range ids {
		h := all[id]
		for i, r := range h {
			ev := r.Event
			if ev.To.Terminal() {
				break
			}
			end := now
			if i+1 < len(h) {
				end = h[i+1].Event.At
			}
			raw := stall{id: id, state: ev.To, d: end.Sub(ev.At), since: ev.At}
			if raw.d > f.longestRaw.d {
				f.longestRaw = raw
			}
			s := raw
			if ev.To == task.Waiting {
				blocked := false
				for _, u := range upstreams(id, ev.Task) {
					e, ok := endedAt[u]
					switch {
					case !ok || e.After(end):
						blocked = true
					case e.After(s.since):
						s.since = e
					}
				}
				if blocked {
					continue // waiting for work that had not ended
				}
				s.d = end.Sub(s.since)
			}
			s.net = s.d - overlap(outages, s.since, s.since.Add(s.d))
			s.netReady = s.net
			if s.state == task.Ready && ev.Task.Capability == task.DefaultCapability {
				s.netReady = s.d - overlap(pf.readyOutages[ev.Task.PriorityLevel()], s.since, s.since.Add(s.d))
			}
			if held := "held: concurrency limit of key "; ev.To == task.Ready && (strings.HasPrefix(ev.Reason, held) || strings.HasPrefix(ev.Task.Reason, held)) {
				if s.d > f.slotWait.d {
					f.slotWait = s
				}
				continue
			}
			f.top = append(f.top, s)
			if s.d > f.longest.d {
				f.longest = s
			}
			if s.net > f.longestNet.net {
				f.longestNet = s
			}
			if s.netReady > f.longestNetReady.netReady {
				f.longestNetReady = s
			}
			if s.d > f.byState[s.state].d {
				f.byState[s.state] = s
			}
		}
	}
	sort.Slice(f.top, func(i, j int) bool { return f.top[i].d > f.top[j].d })
	f.top = f.top[:min(len(f.top), 5)]
	return f
}

// stallsByState renders the longest stall in each state.
func (f *clusterFindings) stallsByState() string {
	var parts []string
	for _, st := range []task.State{task.Waiting, task.Ready, task.Running, task.Retrying} {
		if s, ok := f.byState[st]; ok {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", st, s.d.Round(time.Millisecond), s.id))
		}
	}
	return strings.Join(parts, ", ")
}

// deadLetterCounts reads the dead-letter stream: dead letters per task.
func deadLetterCounts(ctx context.Context, js jetstream.JetStream) (map[string]int, error) {
	out := make(map[string]int)
	// AX_DLQ keeps one message per task: a replay of a failed task's
	// effects (its report applied twice, say, after a reply was lost)
	// overwrites its dead letter, by design. A read that overlaps such an
	// overwrite meets both the old message and the new, and an ordered
	// consumer that resets after a hiccup may deliver one again: count each
	// task once (the stream cannot hold two for one task).
	seen := make(map[string]bool)
	err := readStream(ctx, js, subject.StreamDLQ, nil, func(msg jetstream.Msg, _ *jetstream.MsgMetadata) error {
		if seen[msg.Subject()] {
			return nil
		}
		seen[msg.Subject()] = true
		var dl task.DeadLetter
		if err := json.Unmarshal(msg.Data(), &dl); err != nil {
			return fmt.Errorf("decode dead letter %s: %w", msg.Subject(), err)
		}
		out[dl.Spec.ID]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkMirror waits until the MySQL mirror holds every event of AX_TASKS and
// compares it with the stream: event count and last sequence, events per
// task, and every task's row (state and the revision it reflects).
func checkMirror(t *testing.T, r *clusterRig, db *sql.DB, all map[string][]store.Revisioned, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	var msgs, last uint64
	r.read("the state of AX_TASKS", func(ctx context.Context, js jetstream.JetStream) error {
		st, err := js.Stream(ctx, subject.StreamTasks)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		msgs, last = info.State.Msgs, info.State.LastSeq
		return nil
	})
	var events uint64
	for _, h := range all {
		events += uint64(len(h))
	}
	if events != msgs {
		t.Errorf("read %d events from AX_TASKS, which holds %d", events, msgs)
	}
	start := time.Now()
	eventually(t, timeout, "the mirror catching up with AX_TASKS", func() (bool, string) {
		var count, maxSeq sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(seq) FROM ax_events").Scan(&count, &maxSeq); err != nil {
			return false, err.Error()
		}
		return uint64(count.Int64) == msgs && uint64(maxSeq.Int64) == last,
			fmt.Sprintf("%d rows, max seq %d; stream %d events, last seq %d", count.Int64, maxSeq.Int64, msgs, last)
	})
	t.Logf("mirror: all %d events in MySQL %s after the check started", msgs, time.Since(start).Round(100*time.Millisecond))

	perTask := make(map[string]int)
	rows, err := db.QueryContext(ctx, "SELECT task_id, COUNT(*) FROM ax_events GROUP BY task_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		perTask[id] = n
	}
	rows.Close()
	type row struct {
		state string
		seq   uint64
	}
	tasks := make(map[string]row)
	rows, err = db.QueryContext(ctx, "SELECT id, state, last_seq FROM ax_tasks")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.state, &r.seq); err != nil {
			t.Fatal(err)
		}
		tasks[id] = r
	}
	rows.Close()

	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf("mirror: "+format, args...)
		}
	}
	streamStates, mysqlStates := map[string]int{}, map[string]int{}
	for id, h := range all {
		lastEv := h[len(h)-1]
		streamStates[string(lastEv.Event.To)]++
		if perTask[id] != len(h) {
			report("%s has %d events in MySQL, %d in the stream", id, perTask[id], len(h))
		}
		r, ok := tasks[id]
		switch {
		case !ok:
			report("%s has no row in ax_tasks", id)
		case r.state != string(lastEv.Event.To) || r.seq != lastEv.Revision:
			report("%s: ax_tasks says %s at %d, the stream %s at %d", id, r.state, r.seq, lastEv.Event.To, lastEv.Revision)
		}
	}
	for id, r := range tasks {
		mysqlStates[r.state]++
		if _, ok := all[id]; !ok {
			report("ax_tasks has %s, which the stream does not", id)
		}
	}
	if bad > 20 {
		t.Errorf("mirror: %d differences in all", bad)
	}
	t.Logf("mirror: tasks per state in MySQL %v, in the stream %v; %d differences", mysqlStates, streamStates, bad)
}

// describeStuck counts stuck tasks per state and describes each: how long
// it has been in its state and, for a waiting task, how its upstreams
// (or shards) ended; then the whole history of the first two per state.
func describeStuck(stuck []string, all map[string][]store.Revisioned) (map[task.State]int, string) {
	byState := map[task.State]int{}
	var b strings.Builder
	ended := func(id string) string {
		h := all[id]
		if len(h) == 0 {
			return id + " (missing)"
		}
		last := h[len(h)-1]
		return fmt.Sprintf("%s %s at %d %s", id, last.Event.To, last.Revision, last.Event.At.Format("15:04:05.000"))
	}
	var shown []string
	for i, id := range stuck {
		h := all[id]
		last := h[len(h)-1]
		t := last.Event.Task
		byState[t.State]++
		if byState[t.State] <= 2 {
			shown = append(shown, id)
		}
		if i >= 60 {
			continue
		}
		fmt.Fprintf(&b, "  %s %s/%s since %s (rev %d): %s", id, t.State, t.Phase, last.Event.At.Format("15:04:05.000"), last.Revision, t.Reason)
		switch {
		case t.State == task.Running:
			fmt.Fprintf(&b, "; executor %s, attempt %d, execution %s", t.Executor, t.Attempt, t.ExecutionID)
		case t.State == task.Waiting && len(t.DependsOn) > 0:
			var ups []string
			for _, d := range t.DependsOn {
				ups = append(ups, ended(d))
			}
			fmt.Fprintf(&b, "; upstreams: %s", strings.Join(ups, ", "))
		}
		b.WriteString("\n")
	}
	if len(stuck) > 60 {
		fmt.Fprintf(&b, "  … %d more\n", len(stuck)-60)
	}
	for _, id := range shown {
		fmt.Fprintf(&b, "  history of %s:\n%s", id, describe(all[id]))
	}
	return byState, b.String()
}
