package mirror

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// stack is a running AX: embedded NATS, an orchestrator with fast retries
// and an executor with the demo handlers.
type stack struct {
	url    string
	client *sdk.Client
	js     jetstream.JetStream
}

func startStack(t *testing.T) stack {
	t.Helper()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{
		Retry: orchestrator.RetryPolicy{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond},
	})
	// A 1 s heartbeat: attempts of a few seconds are marked running, so
	// their rows open before they end (an expiry, a cancel).
	ex := testenv.Executor(t, srv.URL(), executor.Config{AckWait: 3 * time.Second})
	demo.Register(ex)
	testenv.Start(t, ex)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return stack{url: srv.URL(), client: testenv.Client(t, srv.URL()), js: js}
}

// logBuffer collects a mirror's logs for assertions (and forwards them to
// the test log when AX_TEST_LOG is set).
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	out io.Writer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.out != nil {
		_, _ = b.out.Write(p)
	}
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLog(t *testing.T) (*zerolog.Logger, *logBuffer) {
	b := &logBuffer{}
	if os.Getenv("AX_TEST_LOG") != "" {
		b.out = zerolog.NewTestWriter(t)
	}
	l := zerolog.New(b).With().Timestamp().Logger()
	return &l, b
}

// fastConfig is a mirror configuration for tests: short waits everywhere.
func fastConfig(log *zerolog.Logger) Config {
	return Config{
		FetchWait:   200 * time.Millisecond,
		AckWait:     2 * time.Second,
		LagInterval: 100 * time.Millisecond,
		RetryMin:    20 * time.Millisecond,
		RetryMax:    200 * time.Millisecond,
		Logger:      log,
	}
}

// startMirror starts a mirror on its own NATS connection; it is stopped when
// the test ends.
func startMirror(t *testing.T, url string, db *sql.DB, cfg Config, h hooks) *Mirror {
	t.Helper()
	m, err := New(testenv.Conn(t, url), db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.hooks = h
	if err := m.Start(testenv.Context(t, 20*time.Second)); err != nil {
		t.Fatalf("start mirror: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

// workload submits a mix that exercises every path the mirror maps:
// successes, retries, dead letters and a redrive, a graph whose downstream
// is cancelled by a failed upstream, and a cancellation while running. It
// waits until every task has ended and returns the ids by role.
type workloadIDs struct {
	all       []string
	flaky     []string
	dead      []string
	redriven  string
	cancelled string // cancelled while running
	cascade   string // cancelled because its upstream failed
	cleanup   string // any_failed after the upstream that failed: ran
	holder    string // held a unique key
	duplicate string // submitted with the holder's key: created cancelled

	neverStarted string // re-dispatched, then failed: no executor serves it
	expired      string // its ttl passed while it ran
	sharded      string // a demo.split job: planner, 4 shards (2 at a time), aggregator
	steps        string // a demo.steps task: 3 steps, a durable sleep after the first
}

// workloadShards is the number of shards of the workload's sharded job.
const workloadShards = 4

func runWorkload(t *testing.T, ctx context.Context, c *sdk.Client, scale int) workloadIDs {
	t.Helper()
	var w workloadIDs
	var specs []task.Spec
	for range 10 * scale {
		specs = append(specs, task.Spec{Type: demo.TypeNoop, Priority: new(2), MaxRetries: new(3)})
	}
	for range 3 * scale {
		specs = append(specs, task.Spec{Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":2}`), Priority: new(1), MaxRetries: new(3)})
	}
	for range scale {
		specs = append(specs, task.Spec{Type: demo.TypeFail, Priority: new(3), MaxRetries: new(1)})
	}
	ids, err := c.SubmitMany(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, ids...)
	w.flaky = slices.Clone(ids[10*scale : 13*scale])
	w.dead = slices.Clone(ids[13*scale:])

	a, b, d, e, f := task.NewID(), task.NewID(), task.NewID(), task.NewID(), task.NewID()
	graph := []task.Spec{
		{ID: a, Type: demo.TypeNoop, Priority: new(2)},
		{ID: b, Type: demo.TypeFlaky, Payload: json.RawMessage(`{"fail_times":1}`), DependsOn: []string{a}, Priority: new(2), MaxRetries: new(2)},
		{ID: task.NewID(), Type: demo.TypeNoop, DependsOn: []string{a, b}, Priority: new(2)},
		{ID: d, Type: demo.TypeFail, Priority: new(2), MaxRetries: new(0)},
		{ID: e, Type: demo.TypeNoop, DependsOn: []string{d}, Priority: new(2)},
		{ID: f, Type: demo.TypeNoop, DependsOn: []string{d}, TriggerRule: task.TriggerAnyFailed, Priority: new(2)},
		{ID: task.NewID(), Type: demo.TypeNoop, DependsOn: []string{a, d}, TriggerRule: task.TriggerAllEnded, Priority: new(2)},
	}
	gids, err := c.SubmitGraph(ctx, graph)
	if err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, gids...)
	w.flaky = append(w.flaky, b)
	w.dead = append(w.dead, d)
	w.cascade, w.cleanup = e, f

	// A unique key held by one task; a second submission with it is a
	// duplicate.
	unique := func() task.Spec {
		return task.Spec{Type: demo.TypeNoop, Priority: new(2), UniqueKey: "customer-42 ⌘", UniqueWindow: task.Duration(time.Hour)}
	}
	if w.holder, err = c.Submit(ctx, unique()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, w.holder); err != nil {
		t.Fatal(err)
	}
	if w.duplicate, err = c.Submit(ctx, unique()); err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, w.holder, w.duplicate)

	// Newer paths: a delayed task, one nobody serves (re-dispatched, then
	// failed without ever starting), one that expires while running (its
	// ttl leaves a loaded executor, behind the workload, time to start it
	// and have it marked running at its first heartbeat, AckWait/3, before
	// it expires).
	w.steps, err = c.Submit(ctx, task.Spec{Type: demo.TypeSteps, Payload: json.RawMessage(`{"steps":3,"nap":"200ms","nap_after":1}`), Priority: new(2)})
	if err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, w.steps)
	extra := []task.Spec{
		{Type: demo.TypeNoop, Priority: new(2), Delay: task.Duration(100 * time.Millisecond)},
		{Type: demo.TypeNoop, Priority: new(2), Capability: "nobody", DispatchTimeout: task.Duration(50 * time.Millisecond), MaxDispatches: 2},
		{Type: demo.TypeSleep, Payload: json.RawMessage(`{"sleep":"10s"}`), Priority: new(2), TTL: task.Duration(4 * time.Second)},
	}
	for _, sp := range extra {
		id, err := c.Submit(ctx, sp)
		if err != nil {
			t.Fatal(err)
		}
		w.all = append(w.all, id)
	}
	w.neverStarted, w.expired = w.all[len(w.all)-2], w.all[len(w.all)-1]

	sleeper, err := c.Submit(ctx, task.Spec{Type: demo.TypeSleep, Payload: json.RawMessage(`{"sleep":"30s"}`), Priority: new(0)})
	if err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, sleeper)
	w.cancelled = sleeper
	testenv.Eventually(t, 15*time.Second, "the sleeper to run", func() bool {
		got, err := c.Get(ctx, sleeper)
		return err == nil && got.State == task.Running
	})
	if _, err := c.Cancel(ctx, sleeper, "test cancels it while running"); err != nil {
		t.Fatal(err)
	}
	for _, id := range w.all {
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatalf("wait %s: %v; %s", id, err, describe(c, id))
		}
	}
	// Re-drive one dead letter: it fails again, making a second series.
	w.redriven = w.dead[0]
	if _, err := c.Redrive(ctx, w.redriven); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, "the re-driven task to fail again", func() bool {
		got, err := c.Get(ctx, w.redriven)
		return err == nil && got.State == task.Failed && got.Redrives == 1
	})
	// A sharded job (shards with parent_id and shard_id, a shards_registered
	// event, parked shards released as slots free up), after the rest so
	// its shards do not hold up the tasks above that race their ttl.
	split := task.Spec{Type: demo.TypeSplit, Payload: json.RawMessage(`{"shards":` + strconv.Itoa(workloadShards) + `,"size":10}`),
		Priority: new(2), Shardable: true, MaxParallelShards: 2}
	if w.sharded, err = c.Submit(ctx, split); err != nil {
		t.Fatal(err)
	}
	w.all = append(w.all, w.sharded)
	if got, err := c.Wait(ctx, w.sharded); err != nil || got.State != task.Succeeded {
		where := []string{describe(c, w.sharded)}
		for i := range workloadShards {
			where = append(where, fmt.Sprintf("shard %d: %s", i, describe(c, task.ShardID(w.sharded, i))))
		}
		t.Fatalf("sharded job %s: %v; %s", w.sharded, err, strings.Join(where, "; "))
	}
	return w
}

// describe says where a task is, for the message of a wait that timed out.
func describe(c *sdk.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.Get(ctx, id)
	if err != nil {
		return "get: " + err.Error()
	}
	return fmt.Sprintf("type %s state %s phase %q parked %v attempt %d dispatches %d executor %q reason %q",
		got.Type, got.State, got.Phase, got.Parked, got.Attempt, got.Dispatches, got.Executor, got.Reason)
}

// streamEvents reads every AX_TASKS message.
func streamEvents(t *testing.T, ctx context.Context, js jetstream.JetStream) []record {
	t.Helper()
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []record
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read AX_TASKS: %v", err)
		}
		md, _ := msg.Metadata()
		r, err := decodeRecord(md.Sequence.Stream, msg.Subject(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
		if md.NumPending == 0 {
			return out
		}
	}
}

// waitCaughtUp waits until ax_events holds every AX_TASKS message and the
// consumer has nothing pending or unacknowledged.
func waitCaughtUp(t *testing.T, js jetstream.JetStream, db *sql.DB, d time.Duration) {
	t.Helper()
	ctx := testenv.Context(t, d+5*time.Second)
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	testenv.Eventually(t, d, "the mirror to catch up", func() bool {
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		var n, maxSeq uint64
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(MAX(seq),0) FROM ax_events").Scan(&n, &maxSeq); err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("stream %d msgs (last %d), mirror %d rows (max %d)", info.State.Msgs, info.State.LastSeq, n, maxSeq)
		if n != info.State.Msgs || maxSeq != info.State.LastSeq {
			return false
		}
		ci, err := js.Consumer(ctx, subject.StreamTasks, subject.ConsumerMirror)
		if err != nil {
			return true // no durable (rebuild-only checks)
		}
		cinfo, err := ci.Info(ctx)
		return err == nil && cinfo.NumPending == 0 && cinfo.NumAckPending == 0
	})
	t.Logf("caught up: %s", last)
}

// checkMirror verifies the three tables against AX_TASKS: every event once,
// in order, with its fields; each task's row equal to its last snapshot;
// one attempt row per claimed execution with the outcome of its last event.
func checkMirror(t *testing.T, ctx context.Context, js jetstream.JetStream, db *sql.DB) []record {
	t.Helper()
	recs := streamEvents(t, ctx, js)

	rows, err := db.QueryContext(ctx, `SELECT seq, task_id, kind, COALESCE(from_state,''), to_state, at, attempt,
		COALESCE(execution_id,''), actor FROM ax_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for rows.Next() {
		var e eventRow
		if err := rows.Scan(&e.Seq, &e.TaskID, &e.Kind, &e.From, &e.To, &e.At, &e.Attempt, &e.ExecutionID, &e.Actor); err != nil {
			t.Fatal(err)
		}
		if i >= len(recs) {
			t.Fatalf("ax_events has more rows than AX_TASKS has messages (extra seq %d)", e.Seq)
		}
		r := recs[i]
		ev := r.Event
		if e.Seq != r.Seq || e.TaskID != r.TaskID || e.Kind != string(ev.Kind) || e.From != string(ev.From) || e.To != string(ev.To) ||
			!e.At.Equal(ev.At.Truncate(time.Microsecond)) || e.Attempt != ev.Task.Attempt || e.ExecutionID != ev.Task.ExecutionID || e.Actor != ev.Actor {
			t.Fatalf("ax_events row %d = %+v, AX_TASKS seq %d = %+v", i, e, r.Seq, ev)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if i != len(recs) {
		t.Fatalf("ax_events has %d rows, AX_TASKS %d messages", i, len(recs))
	}

	// Tasks: the last event of each subject.
	last := map[string]record{}
	for _, r := range recs {
		last[r.TaskID] = r
	}
	var nTasks int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_tasks").Scan(&nTasks); err != nil {
		t.Fatal(err)
	}
	if nTasks != len(last) {
		t.Fatalf("ax_tasks has %d rows, AX_TASKS %d tasks", nTasks, len(last))
	}
	for id, r := range last {
		want := r.Event.Task
		var state, execID, executor, deps string
		var attempt, redrives int
		var lastSeq uint64
		var finished sql.NullTime
		var parent, shard, rule, key, dupOf, cancelledBy sql.NullString
		err := db.QueryRowContext(ctx, `SELECT state, attempt, COALESCE(execution_id,''), COALESCE(executor,''), redrives,
			last_seq, finished_at, dependents, parent_id, shard_id, trigger_rule, unique_key, duplicate_of, cancelled_by FROM ax_tasks WHERE id = ?`, id).
			Scan(&state, &attempt, &execID, &executor, &redrives, &lastSeq, &finished, &deps, &parent, &shard, &rule, &key, &dupOf, &cancelledBy)
		if err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
		wantRule := sql.NullString{}
		if len(want.DependsOn) > 0 {
			wantRule = sql.NullString{String: string(want.Trigger()), Valid: true}
		}
		str := func(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
		if rule != wantRule || key != str(want.UniqueKey) || dupOf != str(want.DuplicateOf) || cancelledBy != str(want.CancelledBy) {
			t.Fatalf("task %s row: trigger_rule=%v unique_key=%v duplicate_of=%v cancelled_by=%v\nwant %+v at seq %d",
				id, rule, key, dupOf, cancelledBy, want, r.Seq)
		}
		var gotDeps []string
		_ = json.Unmarshal([]byte(deps), &gotDeps)
		// A shard has its parent and index; any other task NULL in both.
		wantShard := sql.NullString{}
		if want.IsShard() {
			wantShard = sql.NullString{String: strconv.Itoa(want.ShardIndex), Valid: true}
		}
		if state != string(want.State) || attempt != want.Attempt || execID != want.ExecutionID || executor != want.Executor ||
			redrives != want.Redrives || lastSeq != r.Seq || finished.Valid != (want.FinishedAt != nil) ||
			strings.Join(gotDeps, ",") != strings.Join(want.Dependents, ",") || // legacy lists only
			parent != (sql.NullString{String: want.Parent, Valid: want.IsShard()}) || shard != wantShard {
			t.Fatalf("task %s row: state=%s attempt=%d exec=%s executor=%s redrives=%d last_seq=%d finished=%v dependents=%v parent=%v shard=%v\nwant %+v at seq %d",
				id, state, attempt, execID, executor, redrives, lastSeq, finished.Valid, gotDeps, parent, shard, want, r.Seq)
		}
	}

	// Edges: one row per depends_on entry of every task, and no other.
	wantEdges := map[[2]string]bool{}
	for id, r := range last {
		for _, up := range r.Event.Task.DependsOn {
			wantEdges[[2]string{up, id}] = true
		}
	}
	edgeRows, err := db.QueryContext(ctx, `SELECT upstream_id, dependent_id FROM ax_edges`)
	if err != nil {
		t.Fatal(err)
	}
	gotEdges := map[[2]string]bool{}
	for edgeRows.Next() {
		var e [2]string
		if err := edgeRows.Scan(&e[0], &e[1]); err != nil {
			t.Fatal(err)
		}
		gotEdges[e] = true
	}
	if err := edgeRows.Err(); err != nil {
		t.Fatal(err)
	}
	edgeRows.Close()
	if !maps.Equal(gotEdges, wantEdges) {
		t.Fatalf("ax_edges: got %v, want %v", gotEdges, wantEdges)
	}

	// Attempts: one per claimed execution; the outcome of its last event.
	type att struct{ outcome, executor string }
	want := map[string]att{}
	for _, r := range recs {
		if a, ok := attemptRowOf(r); ok {
			want[a.ExecutionID] = att{a.Outcome, a.Executor}
		}
	}
	got := map[string]att{}
	arows, err := db.QueryContext(ctx, "SELECT execution_id, outcome, COALESCE(executor,'') FROM ax_attempts")
	if err != nil {
		t.Fatal(err)
	}
	defer arows.Close()
	for arows.Next() {
		var id string
		var a att
		if err := arows.Scan(&id, &a.outcome, &a.executor); err != nil {
			t.Fatal(err)
		}
		got[id] = a
	}
	if len(got) != len(want) {
		t.Fatalf("ax_attempts has %d rows, want %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("attempt %s: got %+v, want %+v", id, got[id], w)
		}
	}
	return recs
}

// dump renders the three mirror tables, ordered by key, for comparisons.
func dump(t *testing.T, ctx context.Context, db *sql.DB) string {
	t.Helper()
	var sb strings.Builder
	for _, q := range []string{
		"SELECT * FROM ax_events ORDER BY seq",
		"SELECT * FROM ax_tasks ORDER BY id",
		"SELECT * FROM ax_attempts ORDER BY execution_id",
		"SELECT * FROM ax_steps ORDER BY task_id, name",
		"SELECT * FROM ax_event_waits ORDER BY task_id",
	} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintln(&sb, q, cols)
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if i > 0 {
					sb.WriteByte('|')
				}
				if v == nil {
					sb.WriteString("NULL")
				} else {
					sb.Write(v)
				}
			}
			sb.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return sb.String()
}

// firstDiff shows where two dumps differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  %s\n  %s", i, la[i], lb[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d lines", len(la), len(lb))
}

// attemptsOf returns a task's attempts as "attempt:outcome" in order.
func attemptsOf(t *testing.T, ctx context.Context, db *sql.DB, id string) []string {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT attempt, outcome FROM ax_attempts WHERE task_id = ? ORDER BY started_at, attempt", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n int
		var o string
		if err := rows.Scan(&n, &o); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", n, o))
	}
	return out
}
