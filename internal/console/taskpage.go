package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/workers"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// DAG bounds: how far from the task the graph reaches, and how many
// tasks it shows.
const (
	dagDepth    = 2
	dagMaxNodes = 60
	// maxResultShown bounds the result printed on the page.
	maxResultShown = 64 << 10
	// maxInputsShown bounds the upstreams whose outcome a task page reads
	// (a fan-in may have up to task.MaxDependencies); inputResultShown the
	// summary of one upstream's inline result.
	maxInputsShown   = 50
	inputResultShown = 200
)

// Input is one upstream of the task as its page shows it: how it ended
// and a summary of its result (what the task's handler reads through
// executor.Job.Inputs).
type Input struct {
	task.Input
	// Missing marks an upstream with no record (never submitted, or
	// forgotten after its retention).
	Missing bool
	// Summary is the inline result, compact and cut at inputResultShown.
	Summary string
}

// inputs reads the first maxInputsShown upstreams of t, one record each,
// as task.InputOf makes them for the handler; the bool says whether
// depends_on was cut.
func (s *Server) inputs(ctx context.Context, t *task.Task) ([]Input, bool) {
	ids := t.DependsOn
	cut := len(ids) > maxInputsShown
	if cut {
		ids = ids[:maxInputsShown]
	}
	out := make([]Input, 0, len(ids))
	for _, id := range ids {
		u, err := s.c.Get(ctx, id)
		if err != nil {
			out = append(out, Input{Input: task.Input{ID: id, State: "unknown", Reason: err.Error()}, Missing: true})
			continue
		}
		in := Input{Input: task.InputOf(*u)}
		if len(in.Result) > 0 {
			var buf bytes.Buffer
			if json.Compact(&buf, in.Result) != nil {
				buf.Reset()
				buf.Write(in.Result)
			}
			in.Summary = buf.String()
			if len(in.Summary) > inputResultShown {
				in.Summary = strings.ToValidUTF8(in.Summary[:inputResultShown], "") + "…"
			}
		}
		out = append(out, in)
	}
	return out, cut
}

// Attempt is one claimed execution of a task, from its history.
type Attempt struct {
	Attempt     int
	ExecutionID string
	Executor    string
	Started     time.Time
	Ended       *time.Time
	Outcome     string
	Error       string
	Takeovers   int
	// Step is "planner" or "aggregator" for a sharded task's steps.
	Step string
}

// Duration is how long the attempt ran (so far).
func (a Attempt) Duration(now time.Time) time.Duration {
	if a.Ended != nil {
		return a.Ended.Sub(a.Started)
	}
	return now.Sub(a.Started)
}

// attempts rebuilds the attempts from a task's history: a running mark
// (→ running) opens one, its end (task.Event.EndsAttempt) closes it with its
// outcome and error; a short attempt never marked running is opened and
// closed by its end.
func attempts(h []store.Revisioned) []Attempt {
	var out []Attempt
	open := -1
	planned := false
	for _, r := range h {
		ev := r.Event
		if ev.Kind != task.KindTransition {
			continue
		}
		t := ev.Task
		switch {
		case ev.To == task.Running && ev.From == task.Running && open >= 0:
			out[open].Executor = t.Executor
			out[open].Takeovers++
		case ev.To == task.Running:
			a := Attempt{Attempt: t.Attempt, ExecutionID: t.ExecutionID, Executor: t.Executor, Started: ev.At, Outcome: "running"}
			if planned {
				a.Step = "aggregator"
			}
			out = append(out, a)
			open = len(out) - 1
		case ev.EndsAttempt():
			if open < 0 {
				started := ev.At
				if t.StartedAt != nil {
					started = *t.StartedAt
				}
				a := Attempt{Attempt: t.Attempt, ExecutionID: t.ExecutionID, Executor: t.Executor, Started: started}
				if planned {
					a.Step = "aggregator"
				}
				out = append(out, a)
				open = len(out) - 1
			}
			at := ev.At
			a := &out[open]
			a.Ended = &at
			switch ev.To {
			case task.Retrying, task.Failed:
				a.Outcome = "failed"
			case task.Waiting:
				a.Outcome, a.Step, planned = "planned", "planner", true
			default:
				a.Outcome = string(ev.To)
			}
			for _, e := range t.Errors {
				if e.ExecutionID == a.ExecutionID {
					a.Error = e.Error
				}
			}
			if a.Error == "" && a.Outcome != "succeeded" && a.Outcome != "planned" {
				a.Error = ev.Reason
			}
			open = -1
		}
	}
	return out
}

// Node is a task in the DAG drawing.
type Node struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	State string `json:"state"`
	// Level is negative for upstreams, 0 for the task, positive for dependents.
	Level int  `json:"level"`
	Self  bool `json:"self"`
	// Missing marks an id with no task (never submitted, or removed).
	Missing bool `json:"missing"`
}

// Edge runs from an upstream to the task that depends on it.
type Edge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// DAG is the graph around a task.
type DAG struct {
	Nodes     []Node `json:"nodes"`
	Edges     []Edge `json:"edges"`
	Truncated bool   `json:"truncated"`
}

// dag walks dagDepth levels up (depends_on) and down (dependents) from t,
// reading each task once.
func (s *Server) dag(ctx context.Context, t *task.Task) DAG {
	g := DAG{Nodes: []Node{{ID: t.ID, Type: t.Type, State: string(t.State), Self: true}}}
	seen := map[string]bool{t.ID: true}
	edges := map[Edge]bool{}
	type item struct {
		t     *task.Task
		level int
	}
	walk := func(dir int) {
		level := []item{{t, 0}}
		for d := 1; d <= dagDepth && len(level) > 0; d++ {
			var next []item
			for _, it := range level {
				ids := it.t.DependsOn
				if dir > 0 {
					ids = it.t.Dependents
				}
				for _, id := range ids {
					e := Edge{From: id, To: it.t.ID}
					if dir > 0 {
						e = Edge{From: it.t.ID, To: id}
					}
					if seen[id] {
						if !edges[e] {
							edges[e] = true
							g.Edges = append(g.Edges, e)
						}
						continue
					}
					if len(g.Nodes) >= dagMaxNodes {
						g.Truncated = true
						continue
					}
					seen[id] = true
					edges[e] = true
					g.Edges = append(g.Edges, e)
					n := Node{ID: id, Level: dir * d}
					if u, err := s.c.Get(ctx, id); err == nil {
						n.Type, n.State = u.Type, string(u.State)
						next = append(next, item{u, d})
					} else {
						n.Missing, n.State = true, "unknown"
					}
					g.Nodes = append(g.Nodes, n)
				}
			}
			level = next
		}
	}
	walk(-1)
	walk(1)
	return g
}

// explain answers "why is it in this state": why it has not run, why it
// ran several times, why it is still waiting.
func (s *Server) explain(t *task.Task, g DAG, att []Attempt, shards *sdk.ShardProgress, live *LiveRun, unserved string, now time.Time) []string {
	var out []string
	since := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return fmt.Sprintf(" since %s (%s ago)", p.UTC().Format("15:04:05"), now.Sub(*p).Round(time.Second))
	}
	states := map[string]string{}
	for _, n := range g.Nodes {
		states[n.ID] = n.State
	}
	switch t.State {
	case task.Waiting:
		// Under all_ended and any_failed an upstream holds the task
		// until it ended, under all_succeeded until it succeeded.
		rule := t.Trigger()
		var pending []string
		for _, d := range t.DependsOn {
			st := states[d]
			if st == "" {
				st = "unknown"
			}
			if st == string(task.Succeeded) || rule != task.TriggerAllSucceeded && task.State(st).Terminal() {
				continue
			}
			pending = append(pending, d+" ("+st+")")
		}
		switch {
		case strings.HasPrefix(t.Reason, "held"):
			out = append(out, "Held back: "+t.Reason+". A pause or an open circuit breaker of its type keeps it; resuming the type releases it.")
		case t.Phase == task.PhaseShards && shards != nil:
			out = append(out, fmt.Sprintf("Waiting for its shards: %d of %d ended, %d unfinished.", shards.Total-shards.Unfinished, shards.Total, shards.Unfinished))
		case t.Parked:
			out = append(out, "Parked: waiting for a free slot under its parent's max_parallel_shards.")
		}
		if t.StartAt != nil && t.StartAt.After(now) {
			out = append(out, fmt.Sprintf("Delayed until %s (in %s).", t.StartAt.UTC().Format(time.RFC3339), t.StartAt.Sub(now).Round(time.Second)))
		}
		switch {
		case len(pending) > 0 && rule != task.TriggerAllSucceeded:
			out = append(out, fmt.Sprintf("Waiting for %d of %d dependencies to end (trigger rule %s): %s.", len(pending), len(t.DependsOn), rule, strings.Join(pending, ", ")))
		case len(pending) > 0:
			out = append(out, fmt.Sprintf("Waiting for %d of %d dependencies: %s.", len(pending), len(t.DependsOn), strings.Join(pending, ", ")))
		}
		if w := t.WaitFor; w != nil {
			if t.EventWaitSince != nil {
				line := fmt.Sprintf("Waiting for event ax.event.%s%s", w.EventSubject(), since(t.EventWaitSince))
				if t.ExpiresAt != nil {
					line += fmt.Sprintf(", until its timeout at %s (in %s)", t.ExpiresAt.UTC().Format(time.RFC3339), t.ExpiresAt.Sub(now).Round(time.Second))
				}
				out = append(out, line+". An operator may approve or reject it in place of the event.")
			} else {
				out = append(out, fmt.Sprintf("An event task: once its dependencies and start time allow, it waits for event ax.event.%s (timeout %s).", w.EventSubject(), w.Timeout.Std()))
			}
		}
		if len(out) == 0 {
			out = append(out, "Waiting"+since(&t.UpdatedAt)+": "+t.Reason)
		}
	case task.Ready:
		if live != nil {
			// Its record moves to running only if the attempt outlives
			// a heartbeat; the executor's announcement says it runs.
			out = append(out, fmt.Sprintf("Running on executor %s%s (attempt %d of %d): its handler started; the record says ready until the attempt outlives a heartbeat.",
				live.Executor, since(&live.Since), t.Attempt, t.RetryLimit()+1))
			break
		}
		out = append(out, fmt.Sprintf("Queued%s on capability %q at priority p%d (attempt %d of %d), waiting for an executor with free capacity.",
			since(t.ReadyAt), t.Capability, t.PriorityLevel(), t.Attempt, t.RetryLimit()+1))
		if unserved != "" {
			out = append(out, upperFirst(unserved)+".")
		}
		if t.Dispatches > 1 {
			out = append(out, fmt.Sprintf("Dispatched %d times without being started.", t.Dispatches))
		}
	case task.Running:
		out = append(out, fmt.Sprintf("Running on executor %s%s (attempt %d of %d).", t.Executor, since(t.StartedAt), t.Attempt, t.RetryLimit()+1))
	case task.Retrying:
		last := ""
		if n := len(t.Errors); n > 0 {
			last = t.Errors[n-1].Error
		}
		at := "unknown"
		if t.RetryAt != nil {
			at = t.RetryAt.UTC().Format(time.RFC3339) + fmt.Sprintf(" (in %s)", t.RetryAt.Sub(now).Round(time.Second))
		}
		out = append(out, fmt.Sprintf("Attempt %d of %d failed (%s); the next attempt starts at %s.", t.Attempt, t.RetryLimit()+1, last, at))
		if strings.HasPrefix(t.Reason, "held") {
			out = append(out, "Held back: "+t.Reason+".")
		}
	default:
		line := fmt.Sprintf("%s%s", strings.ToUpper(string(t.State[:1]))+string(t.State[1:]), since(t.FinishedAt))
		if t.Reason != "" {
			line += ": " + t.Reason
		}
		out = append(out, line+".")
		if t.State == task.Failed && !t.IsShard() {
			out = append(out, "It is in the dead-letter queue; re-driving it starts a fresh series of attempts.")
		}
		if t.DuplicateOf != "" {
			out = append(out, fmt.Sprintf("A duplicate of %s, which held unique_key %q of type %s when it was submitted: it never ran.",
				t.DuplicateOf, t.UniqueKey, t.Type))
		}
		if t.CancelledBy != "" {
			out = append(out, fmt.Sprintf("Cancelled because its upstream %s did not succeed; once %s is fixed, re-driving it with its dependents (ax redrive %s --with-dependents) re-opens this task under the same id.",
				t.CancelledBy, t.CancelledBy, t.CancelledBy))
		}
	}
	troubled := false
	for _, a := range att {
		troubled = troubled || a.Outcome == "failed" || a.Takeovers > 0
	}
	if len(att) > 1 && troubled {
		var parts []string
		for _, a := range att {
			p := fmt.Sprintf("attempt %d %s", a.Attempt, a.Outcome)
			if a.Step != "" {
				p = a.Step + " " + p
			}
			if a.Takeovers > 0 {
				p += fmt.Sprintf(" after %d take-over(s)", a.Takeovers)
			}
			if a.Error != "" {
				p += " (" + a.Error + ")"
			}
			parts = append(parts, p)
		}
		out = append(out, fmt.Sprintf("It ran %d times: %s.", len(att), strings.Join(parts, "; ")))
	}
	if t.Redrives > 0 {
		out = append(out, fmt.Sprintf("Re-driven from the dead-letter queue %d time(s).", t.Redrives))
	}
	return out
}

func (s *Server) handleTask(w http.ResponseWriter, r *http.Request, v *visit) {
	id := r.PathValue("id")
	if !task.ValidID(id) {
		s.fail(w, r, v, http.StatusBadRequest, "Bad task id", fmt.Sprintf("%q is not a valid task id (1–128 of A-Z a-z 0-9 _ - = /).", id))
		return
	}
	ctx := r.Context()
	t, err := s.c.Get(ctx, id)
	if part := r.URL.Query().Get("part"); part != "" {
		s.taskPart(w, r, v, t, err, part)
		return
	}
	var rej *sdk.RejectedError
	switch {
	case errors.As(err, &rej):
		s.render(w, r, v, http.StatusOK, "rejection", map[string]any{"Title": "Rejected " + id, "R": rej.Rejection})
		return
	case errors.Is(err, sdk.ErrNotFound):
		s.fail(w, r, v, http.StatusNotFound, "Task not found", fmt.Sprintf("No task has the id %q (and no submission with it was rejected).", id))
		return
	case err != nil:
		s.fail(w, r, v, http.StatusBadGateway, "Task unavailable", err.Error())
		return
	}
	h, err := s.c.History(ctx, id)
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "History unavailable", err.Error())
		return
	}
	now := s.now()
	att := attempts(h)
	g := s.dag(ctx, t)
	data := map[string]any{"Title": "Task " + id, "T": t, "History": h, "Attempts": att, "DAG": g, "Now": now}
	var shards *sdk.ShardProgress
	if t.Shardable {
		if shards, err = s.c.Shards(ctx, id); err == nil {
			data["Shards"] = shards
			data["ShardBar"] = shardBar(shards)
		}
		if s.cfg.Auditor != nil {
			if rep, err := s.cfg.Auditor.Shards(ctx, id, 50); err == nil {
				data["FailedShards"] = rep.Failed
				data["FailedShardsTotal"] = rep.FailedTotal()
			} else if !errors.Is(err, audit.ErrNotFound) {
				data["ShardsError"] = err.Error()
			}
		}
	}
	live, unserved := s.liveRun(ctx, t)
	data["Live"] = live
	data["Why"] = s.explain(t, g, att, shards, live, unserved, now)
	if len(t.DependsOn) > 0 {
		data["Inputs"], data["InputsCut"] = s.inputs(ctx, t)
	}
	spec, _ := json.MarshalIndent(t.Spec, "", "  ")
	data["Spec"] = string(spec)
	if t.State == task.Succeeded {
		res := t.Result
		if t.ResultObject != "" {
			if res, err = s.c.Result(ctx, id); err != nil {
				data["ResultError"] = err.Error()
			}
		}
		data["Result"] = prettyJSON(res, maxResultShown)
	}
	data["Reruns"], data["RerunOf"] = s.reruns(ctx, id)
	data["CanCancel"] = !t.State.Terminal()
	data["CanRedrive"] = t.State == task.Failed && !t.IsShard()
	data["CanRerun"] = t.State.Terminal() && !t.IsShard()
	// Approve and Reject only where they apply, and only to operators.
	data["CanApprove"] = awaitingEvent(t) && v.User.Operator()
	s.render(w, r, v, http.StatusOK, "task", data)
}

// maxRerunsShown bounds the re-runs a task page looks up.
const maxRerunsShown = 20

// reruns finds the forced re-runs of a task (ids "<id>-rerun-<n>", one
// direct read each) and, for a re-run, the task it re-ran.
func (s *Server) reruns(ctx context.Context, id string) (reruns []string, of string) {
	for n := 1; n <= maxRerunsShown; n++ {
		rid := fmt.Sprintf("%s-rerun-%d", id, n)
		if _, err := s.c.Get(ctx, rid); err != nil {
			break
		}
		reruns = append(reruns, rid)
	}
	if i := strings.LastIndex(id, "-rerun-"); i > 0 {
		if _, err := strconv.Atoi(id[i+len("-rerun-"):]); err == nil {
			if _, err := s.c.Get(ctx, id[:i]); err == nil {
				of = id[:i]
			}
		}
	}
	return reruns, of
}

// prettyJSON indents a JSON value for display, cut at limit bytes.
func prettyJSON(raw json.RawMessage, limit int) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Indent(&buf, raw, "", "  ") != nil {
		buf.Reset()
		buf.Write(raw)
	}
	out := buf.String()
	if len(out) > limit {
		out = out[:limit] + fmt.Sprintf("\n… (%d more bytes)", len(out)-limit)
	}
	return out
}

// Bar is one segment of a progress bar.
type Bar struct {
	Class string
	Pct   int
	N     int
}

func shardBar(p *sdk.ShardProgress) []Bar {
	if p.Total == 0 {
		return nil
	}
	var out []Bar
	for _, st := range []task.State{task.Succeeded, task.Failed, task.Cancelled, task.Expired} {
		if n := p.Ended[st]; n > 0 {
			out = append(out, Bar{Class: "p-" + string(st), Pct: n * 100 / p.Total, N: n})
		}
	}
	return out
}

// LiveRun is the handler of a task's current execution running now, as
// its executor announces it in the workers registry: shown on the task
// page (refreshed live) before the record says running, with the
// handler's progress.
type LiveRun struct {
	Executor string
	task.WorkerExecution
}

// liveRun finds the handler of t's current execution in the workers
// registry (nil for a task that ended, or one not running now); for a
// ready task that runs nowhere, unserved says why no executor running now
// can take it ("" when one can; without a readable registry, whether an
// executor of its capability was seen in the task events lately). One
// read of the registry.
func (s *Server) liveRun(ctx context.Context, t *task.Task) (live *LiveRun, unserved string) {
	if t == nil || t.State.Terminal() {
		return nil, ""
	}
	ws, err := s.c.Workers(ctx)
	if err != nil {
		if t.State == task.Ready && !s.watch.serves(t.Capability) {
			unserved = fmt.Sprintf("no executor serving capability %q was seen lately", t.Capability)
		}
		return nil, unserved
	}
	if id, x, ok := workers.Running(ws, t.ID, t.ExecutionID); ok {
		return &LiveRun{Executor: id, WorkerExecution: x}, ""
	}
	if t.State == task.Ready {
		unserved = workers.Unserved(ws, t.Capability, t.Type)
	}
	return nil, unserved
}

// upperFirst makes a sentence of a clause.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// taskPart renders a live fragment of a task page: "live", where its
// handler runs now and its progress.
func (s *Server) taskPart(w http.ResponseWriter, r *http.Request, v *visit, t *task.Task, err error, part string) {
	if part != "live" {
		s.fail(w, r, v, http.StatusBadRequest, "Bad request", "There is no part "+strconv.Quote(part)+" of a task page.")
		return
	}
	if err != nil {
		s.fail(w, r, v, http.StatusNotFound, "Task unavailable", err.Error())
		return
	}
	live, _ := s.liveRun(r.Context(), t)
	s.renderPart(w, r, v, "task", part, map[string]any{"T": t, "Live": live, "Now": s.now()})
}
