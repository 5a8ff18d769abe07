package console

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// bucketSize is the width of a throughput bucket.
const bucketSize = time.Minute

// executorIdle is how long an executor counts as online after its last
// claim or report.
const executorIdle = 5 * time.Minute

// watcher follows AX_TASKS from a little before the console started and
// keeps, in memory, attempts ended per type and minute, and which executors
// claim tasks (with their capabilities and running cost). One ordered
// consumer, whatever the number of browsers.
type watcher struct {
	js     jetstream.JetStream
	now    func() time.Time
	events int
	window time.Duration
	log    zerolog.Logger
	cons   jetstream.Consumer
	done   func()

	mu        sync.Mutex
	buckets   map[int64]map[string]*typeCount // bucket start (unix) → type → counts
	executors map[string]*executorState
	running   map[string]runningTask // task id → its claim
	lastSeq   uint64
}

type typeCount struct{ Succeeded, Failed int }

type executorState struct {
	caps     map[string]bool
	lastSeen time.Time
}

type runningTask struct {
	executor string
	cost     float64
}

func newWatcher(js jetstream.JetStream, now func() time.Time, events int, window time.Duration, log zerolog.Logger) *watcher {
	return &watcher{js: js, now: now, events: events, window: window, log: log,
		buckets: map[int64]map[string]*typeCount{}, executors: map[string]*executorState{}, running: map[string]runningTask{}}
}

// open starts the consumer at the later of "window ago" and "events back".
func (w *watcher) open(ctx context.Context) error {
	st, err := w.js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if info.State.LastSeq > uint64(w.events) {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = info.State.LastSeq - uint64(w.events) + 1
	}
	cons, done, err := scan.Open(ctx, w.js, subject.StreamTasks, cfg)
	if err != nil {
		return err
	}
	w.cons, w.done = cons, done
	return nil
}

func (w *watcher) run(ctx context.Context) {
	defer w.done()
	for ctx.Err() == nil {
		batch, err := w.cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, jetstream.ErrNoMessages) {
				w.log.Debug().Err(err).Msg("console watcher fetch")
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			continue
		}
		for msg := range batch.Messages() {
			var ev task.Event
			if json.Unmarshal(msg.Data(), &ev) != nil {
				continue
			}
			md, _ := msg.Metadata()
			w.apply(ev, md)
		}
	}
}

func (w *watcher) apply(ev task.Event, md *jetstream.MsgMetadata) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if md != nil {
		w.lastSeq = md.Sequence.Stream
	}
	now := w.now()
	if ev.Kind != task.KindTransition || now.Sub(ev.At) > w.window {
		if ev.Kind == task.KindTransition {
			w.track(ev) // still follow who runs what
		}
		return
	}
	w.track(ev)
	if ev.EndsAttempt() && ev.To != task.Waiting {
		b := ev.At.Truncate(bucketSize).Unix()
		m := w.buckets[b]
		if m == nil {
			m = map[string]*typeCount{}
			w.buckets[b] = m
		}
		tc := m[ev.Task.Type]
		if tc == nil {
			tc = &typeCount{}
			m[ev.Task.Type] = tc
		}
		switch ev.To {
		case task.Succeeded:
			tc.Succeeded++
		case task.Retrying, task.Failed:
			tc.Failed++
		}
	}
	cut := now.Add(-w.window).Truncate(bucketSize).Unix()
	for b := range w.buckets {
		if b < cut {
			delete(w.buckets, b)
		}
	}
}

// track follows who runs what: a task marked running names its executor,
// and so does the end of an attempt (a short one is never marked).
func (w *watcher) track(ev task.Event) {
	t := ev.Task
	if ev.To == task.Running && t.Executor != "" {
		w.seen(t.Executor, t.Capability, ev.At)
		w.running[t.ID] = runningTask{executor: t.Executor, cost: t.EstimatedCost}
		return
	}
	if ev.EndsAttempt() {
		if t.Executor != "" {
			w.seen(t.Executor, t.Capability, ev.At)
		}
		delete(w.running, t.ID)
	}
}

// seen notes an executor serving a capability at a time.
func (w *watcher) seen(executor, capability string, at time.Time) {
	e := w.executors[executor]
	if e == nil {
		e = &executorState{caps: map[string]bool{}}
		w.executors[executor] = e
	}
	e.caps[capability] = true
	if at.After(e.lastSeen) {
		e.lastSeen = at
	}
}

// Series is attempts ended per type and minute, oldest bucket first.
type Series struct {
	Buckets   []int64          `json:"buckets"` // unix seconds
	Types     []string         `json:"types"`
	Succeeded map[string][]int `json:"succeeded"`
	Failed    map[string][]int `json:"failed"`
}

func newSeries(now time.Time, window time.Duration) Series {
	s := Series{Succeeded: map[string][]int{}, Failed: map[string][]int{}}
	end := now.Truncate(bucketSize)
	for b := end.Add(-window + bucketSize); !b.After(end); b = b.Add(bucketSize) {
		s.Buckets = append(s.Buckets, b.Unix())
	}
	return s
}

func (s *Series) add(typ string, bucket int64, ok, failed int) {
	i := sort.Search(len(s.Buckets), func(i int) bool { return s.Buckets[i] >= bucket })
	if i == len(s.Buckets) || s.Buckets[i] != bucket {
		return
	}
	if _, seen := s.Succeeded[typ]; !seen {
		s.Types = append(s.Types, typ)
		s.Succeeded[typ] = make([]int, len(s.Buckets))
		s.Failed[typ] = make([]int, len(s.Buckets))
	}
	s.Succeeded[typ][i] += ok
	s.Failed[typ][i] += failed
}

func (w *watcher) series(window time.Duration) Series {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := newSeries(w.now(), window)
	for b, m := range w.buckets {
		for typ, c := range m {
			s.add(typ, b, c.Succeeded, c.Failed)
		}
	}
	sort.Strings(s.Types)
	return s
}

// ExecutorRow is an executor online: from the workers registry (idle
// ones too), or, without one, seen running or finishing a task lately.
type ExecutorRow struct {
	ID           string   `json:"id"`
	Capabilities []string `json:"capabilities"`
	Running      int      `json:"running"`
	Load         float64  `json:"load"`
	// Capacity is 0 for an executor only seen in the task events.
	Capacity float64   `json:"capacity"`
	LastSeen time.Time `json:"last_seen"`
}

// executorRowsOf are the overview's rows of the registry's executors.
func executorRowsOf(ws []task.Worker) []ExecutorRow {
	out := make([]ExecutorRow, len(ws))
	for i, w := range ws {
		out[i] = ExecutorRow{ID: w.ID, Capabilities: w.Capabilities, Running: w.RunningTotal, Load: w.InFlight, Capacity: w.Capacity, LastSeen: w.HeartbeatAt}
	}
	return out
}

func (w *watcher) executorRows() []ExecutorRow {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	rows := map[string]*ExecutorRow{}
	for id, e := range w.executors {
		r := &ExecutorRow{ID: id, LastSeen: e.lastSeen}
		for c := range e.caps {
			r.Capabilities = append(r.Capabilities, c)
		}
		sort.Strings(r.Capabilities)
		rows[id] = r
	}
	for _, rt := range w.running {
		if r := rows[rt.executor]; r != nil {
			r.Running++
			r.Load += rt.cost
		}
	}
	var out []ExecutorRow
	for _, r := range rows {
		if r.Running > 0 || now.Sub(r.LastSeen) < executorIdle {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// serves reports whether an executor of capability was seen lately.
func (w *watcher) serves(capability string) bool {
	for _, r := range w.executorRows() {
		for _, c := range r.Capabilities {
			if c == capability {
				return true
			}
		}
	}
	return false
}
