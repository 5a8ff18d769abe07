package console

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// chartWindow is how far back the overview's charts reach; terminalWindow
// how far back the overview counts tasks in a final state.
const (
	chartWindow    = 30 * time.Minute
	terminalWindow = 24 * time.Hour
	// countCap bounds the index entries one state's count reads.
	countCap = 100000
)

// Overview is the live state shown on the console's first page (and
// served as JSON at /api/overview).
type Overview struct {
	At time.Time `json:"at"`
	// Source is "mysql" when States and the charts come from the mirror.
	Source string `json:"source"`
	// States counts tasks per state (mirror only; nil without it): all
	// tasks in an active state, those that ended in the last TerminalWindow
	// in a final state.
	States         map[string]int `json:"states,omitempty"`
	TerminalWindow time.Duration  `json:"terminal_window,omitempty"`
	// StatesAt is when States and (with the mirror) Series were read.
	StatesAt time.Time `json:"states_at,omitempty"`
	// CountCap bounds each count: a state with more tasks shows CountCap.
	CountCap int `json:"count_cap,omitempty"`
	// Tasks is the number of task histories in AX_TASKS.
	Tasks uint64 `json:"tasks"`
	// Queues are the streams' backlogs: submissions and reports not yet
	// handled, held tasks, dead letters, pending timers.
	Queues   map[string]uint64 `json:"queues"`
	Backlog  []BacklogRow      `json:"backlog"`
	Series   Series            `json:"series"`
	Executor []ExecutorRow     `json:"executors"`
	Pauses   []PauseRow        `json:"pauses"`
	Breakers []BreakerRow      `json:"breakers"`
	// Limits are the key limits set at run time with the concurrency keys
	// in use under each (sdk.Client.Limits); a last entry without a
	// pattern gathers the keys limited by the orchestrators'
	// configuration.
	Limits []sdk.LimitStatus `json:"limits"`
	// BusyKeys are the concurrency keys at or near their limit, fullest
	// first, at most busyKeysShown.
	BusyKeys []BusyKey `json:"busy_keys"`
	// MirrorLag is nil without a mirror.
	MirrorLag *LagRow `json:"mirror_lag,omitempty"`
	// Recent are the newest audit events (operators, pauses, breakers).
	Recent []task.AuditEvent `json:"recent"`
	// Errors lists parts that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// BacklogRow is the undelivered dispatches of one capability and priority.
type BacklogRow struct {
	Capability string `json:"capability"`
	Priority   int    `json:"priority"`
	Pending    uint64 `json:"pending"`
	// OldestAge is how long the oldest undelivered dispatch has waited.
	OldestAge time.Duration `json:"oldest_age"`
}

// PauseRow is a pause switch ("" type: every type).
type PauseRow struct {
	Type string `json:"type"`
	task.Pause
}

// BreakerRow is a task type's circuit breaker.
type BreakerRow struct {
	Type string `json:"type"`
	sdk.BreakerStatus
}

// BusyKey is a concurrency key at or near its limit: at least 80 % of its
// slots taken, or an adaptive limit lowered below the limit's concurrency.
type BusyKey struct {
	// Pattern is the run-time limit governing the key ("" for one of the
	// orchestrators' configuration).
	Pattern string `json:"pattern"`
	sdk.KeyUsage
}

// busyKeysShown bounds Overview.BusyKeys.
const busyKeysShown = 50

// HasRuntimeLimits reports whether a key limit was set at run time.
func (o *Overview) HasRuntimeLimits() bool {
	for _, l := range o.Limits {
		if l.Limit.Key != "" {
			return true
		}
	}
	return false
}

// busyKeys returns the keys of ls at or near their limit, fullest first.
func busyKeys(ls []sdk.LimitStatus) []BusyKey {
	var out []BusyKey
	for _, s := range ls {
		for _, u := range s.Keys {
			lowered := u.Adaptive > 0 && s.Limit.Concurrency > 0 && u.Adaptive < float64(s.Limit.Concurrency)
			if lowered || (u.Limit > 0 && 5*u.InUse >= 4*u.Limit) {
				out = append(out, BusyKey{Pattern: s.Limit.Key, KeyUsage: u})
			}
		}
	}
	fill := func(b BusyKey) float64 {
		if b.Limit == 0 {
			return 0
		}
		return float64(b.InUse) / float64(b.Limit)
	}
	sort.SliceStable(out, func(i, j int) bool { return fill(out[i]) > fill(out[j]) })
	if len(out) > busyKeysShown {
		out = out[:busyKeysShown]
	}
	return out
}

// LagRow is how far the mirror is behind.
type LagRow struct {
	Pending uint64        `json:"pending"`
	Age     time.Duration `json:"age"`
}

// overview returns the cached overview, computing it when older than the TTL.
func (s *Server) overview(ctx context.Context) (*Overview, error) {
	s.ovMu.Lock()
	defer s.ovMu.Unlock()
	if s.ov != nil && s.now().Sub(s.ov.At) < s.cfg.OverviewTTL {
		return s.ov, s.ovErr
	}
	s.ov, s.ovErr = s.computeOverview(ctx)
	return s.ov, s.ovErr
}

// forgetOverview drops the cached overview.
func (s *Server) forgetOverview() {
	s.ovMu.Lock()
	s.ov = nil
	s.ovMu.Unlock()
}

func (s *Server) computeOverview(ctx context.Context) (*Overview, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := s.now()
	ov := &Overview{At: now, Source: "jetstream", Queues: map[string]uint64{}}
	note := func(what string, err error) {
		if err != nil {
			ov.Errors = append(ov.Errors, what+": "+err.Error())
		}
	}
	for _, name := range []string{subject.StreamSubmit, subject.StreamCompleted, subject.StreamHeld, subject.StreamDLQ, subject.StreamTimers, subject.StreamTasks, subject.StreamRejected} {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			note(name, err)
			continue
		}
		info, err := st.Info(ctx)
		if err != nil {
			note(name, err)
			continue
		}
		switch {
		case name == subject.StreamTasks:
			ov.Tasks = info.State.NumSubjects
		case slices.Contains(topology.Queues, name):
			// Handled messages stay until the next trim: count what is
			// still to be handled.
			n, err := queue.Depth(ctx, s.js, name)
			note(name, err)
			ov.Queues[name] = n
		default:
			ov.Queues[name] = info.State.Msgs
		}
	}
	var err error
	ov.Backlog, err = s.backlog(ctx, now)
	note("ready backlog", err)
	gates, err := s.c.Gates(ctx)
	note("gates", err)
	if gates != nil {
		for typ, p := range gates.Pauses {
			ov.Pauses = append(ov.Pauses, PauseRow{Type: typ, Pause: p})
		}
		sort.Slice(ov.Pauses, func(i, j int) bool { return ov.Pauses[i].Type < ov.Pauses[j].Type })
		for typ, b := range gates.Breakers {
			ov.Breakers = append(ov.Breakers, BreakerRow{Type: typ, BreakerStatus: b})
		}
		sort.Slice(ov.Breakers, func(i, j int) bool { return ov.Breakers[i].Type < ov.Breakers[j].Type })
	}
	ov.Limits, err = s.c.Limits(ctx)
	note("key limits", err)
	ov.BusyKeys = busyKeys(ov.Limits)
	ov.Recent, err = s.c.AuditEvents(ctx, 12)
	note("audit events", err)
	for i, j := 0, len(ov.Recent)-1; i < j; i, j = i+1, j-1 {
		ov.Recent[i], ov.Recent[j] = ov.Recent[j], ov.Recent[i]
	}
	if ws, err := s.c.Workers(ctx); err == nil {
		ov.Executor = executorRowsOf(ws)
	} else {
		// An older deployment without the registry: executors seen
		// in the task events.
		note("workers registry", err)
		ov.Executor = s.watch.executorRows()
	}
	ov.Series = s.watch.series(chartWindow)
	if s.cfg.Auditor != nil {
		ov.Source = "mysql"
		ov.TerminalWindow = terminalWindow
		ov.CountCap = countCap
		st := s.mirrorStats(ctx, now)
		ov.States, ov.StatesAt, ov.Series = st.states, st.at, st.series
		ov.Errors = append(ov.Errors, st.errs...)
		if l, err := mirror.ConsumerLag(ctx, s.js, now); err == nil {
			ov.MirrorLag = &LagRow{Pending: l.Pending + uint64(l.InFlight), Age: l.Age}
		} else {
			note("mirror lag", err)
		}
	}
	return ov, nil
}

// mirrorStats is the part of the overview read from the mirror.
type mirrorStats struct {
	at     time.Time
	states map[string]int
	series Series
	errs   []string
}

// mirrorStats returns the mirror's counts and throughput. They are read
// at most every OverviewTTL; once there is a first reading, a stale one is
// served while a fresh one is read in the background, so a slow database
// never slows the overview down.
func (s *Server) mirrorStats(ctx context.Context, now time.Time) mirrorStats {
	s.myMu.Lock()
	cur := s.my
	have := !cur.at.IsZero()
	if have && (s.myBusy || now.Sub(cur.at) < s.cfg.OverviewTTL) {
		s.myMu.Unlock()
		return cur
	}
	s.myBusy = true
	s.myMu.Unlock()
	store := func(st mirrorStats) {
		s.myMu.Lock()
		s.my, s.myBusy = st, false
		s.myMu.Unlock()
	}
	if !have {
		st := s.readMirrorStats(ctx, now)
		store(st)
		return st
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		store(s.readMirrorStats(ctx, s.now()))
	}()
	return cur
}

func (s *Server) readMirrorStats(ctx context.Context, now time.Time) mirrorStats {
	st := mirrorStats{at: now, series: newSeries(now, chartWindow)}
	var err error
	if st.states, err = s.cfg.Auditor.StateCounts(ctx, now.Add(-terminalWindow), countCap); err != nil {
		st.errs = append(st.errs, "task counts (MySQL): "+err.Error())
	}
	pts, err := s.cfg.Auditor.Throughput(ctx, now.Add(-chartWindow), bucketSize)
	if err != nil {
		st.errs = append(st.errs, "throughput (MySQL): "+err.Error())
	}
	for _, p := range pts {
		st.series.add(p.Type, p.Bucket.Unix(), p.Succeeded, p.Failed)
	}
	sort.Strings(st.series.Types)
	return st
}

// backlog reads, for every capability and priority with dispatches, the
// ready consumer's undelivered count and the age of its oldest dispatch
// (queue.ReadyLevels): two requests per non-empty level, whatever the
// number of tasks.
func (s *Server) backlog(ctx context.Context, now time.Time) ([]BacklogRow, error) {
	levels, err := queue.ReadyLevels(ctx, s.js, now)
	if err != nil {
		return nil, err
	}
	var out []BacklogRow
	for _, lv := range levels {
		if lv.Pending > 0 {
			out = append(out, BacklogRow{Capability: lv.Capability, Priority: lv.Priority, Pending: lv.Pending, OldestAge: lv.Oldest})
		}
	}
	return out, nil
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request, v *visit) {
	ov, err := s.overview(r.Context())
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Overview unavailable", err.Error())
		return
	}
	data := map[string]any{"Title": "Overview", "O": ov, "States": task.States()}
	switch part := r.URL.Query().Get("part"); part {
	case "":
		s.render(w, r, v, http.StatusOK, "overview", data)
	case "live":
		s.renderPart(w, r, v, "overview", part, data)
	default:
		s.fail(w, r, v, http.StatusBadRequest, "Bad request", "There is no part "+strconv.Quote(part)+" of the overview.")
	}
}

func (s *Server) handleOverviewJSON(w http.ResponseWriter, r *http.Request, _ *visit) {
	ov, err := s.overview(r.Context())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, ov)
}
