package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Actions an operator can take (POST /actions/<name>).
const (
	actCancel         = "cancel"
	actRedrive        = "redrive"
	actRerun          = "rerun"
	actPause          = "pause"
	actResume         = "resume"
	actSchedulePause  = "schedule-pause"
	actScheduleResume = "schedule-resume"
	actScheduleRun    = "schedule-trigger"
	// actDLQDiscard discards dead letters (dlq.go): their tasks stay failed.
	actDLQDiscard = "dlq-discard"
	// actApprove and actReject decide an event task waiting for its event
	// (sdk.Client.Approve).
	actApprove = "approve"
	actReject  = "reject"
)

// bulkWorkers bounds the commands a bulk action has in flight.
const bulkWorkers = 8

// plan is an action resolved from its form, ready to confirm or carry out.
type plan struct {
	Action  string
	Summary string
	// IDs are the tasks it touches (task actions), Scope the type ("" all)
	// or schedule name otherwise.
	IDs    []string
	Scope  string
	Reason string
	// RetriesOnly applies to pause.
	RetriesOnly bool
	// WithDependents applies to re-drive: the dependents the failure
	// cancelled are re-opened too (the confirmation page's checkbox).
	WithDependents bool
	// Schedule is the schedule a schedule-save stores (schedules.go).
	Schedule *task.Schedule
	// Fields are the form's fields, posted again on confirmation.
	Fields [][2]string
	Back   string
}

// outcome is what one command did.
type outcome struct {
	Target string
	OK     bool
	Detail string
	Link   string
}

func (s *Server) handleAction(w http.ResponseWriter, r *http.Request, v *visit) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := s.auth.checkPost(r); err != nil {
		s.fail(w, r, v, http.StatusForbidden, "Form refused", err.Error()+" Nothing was changed.")
		return
	}
	if !v.User.Operator() {
		msg := "You are not logged in as an operator, so this console is read-only for you. Nothing was changed."
		if !v.CanLogin {
			msg = "This console is read-only: no operator credential is configured (set AX_CONSOLE_TOKEN or --credentials-file). Nothing was changed."
		}
		s.fail(w, r, v, http.StatusForbidden, "Read-only", msg)
		return
	}
	ctx := r.Context()
	p, err := s.resolve(ctx, r.PathValue("action"), r.PostForm)
	if err != nil {
		s.fail(w, r, v, http.StatusBadRequest, "Action refused", err.Error()+" Nothing was changed.")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		s.render(w, r, v, http.StatusOK, "confirm", map[string]any{"Title": "Confirm", "P": p})
		return
	}
	results := s.carryOut(ctx, v.User, p)
	s.forgetOverview() // the next overview shows the action's effect
	failed := 0
	for _, o := range results {
		if !o.OK {
			failed++
		}
	}
	status := http.StatusOK
	if failed == len(results) && failed > 0 {
		status = http.StatusConflict
	}
	s.render(w, r, v, status, "done", map[string]any{"Title": "Done", "P": p, "Results": results, "Failed": failed})
}

// resolve validates an action's form and works out what it would do.
func (s *Server) resolve(ctx context.Context, action string, f url.Values) (*plan, error) {
	p := &plan{Action: action, Reason: strings.TrimSpace(f.Get("reason")), Back: safeNext(f.Get("back"))}
	if len(p.Reason) > 500 {
		return nil, fmt.Errorf("the reason is longer than 500 characters.")
	}
	keep := func(names ...string) {
		for _, n := range names {
			for _, val := range f[n] {
				p.Fields = append(p.Fields, [2]string{n, val})
			}
		}
	}
	keep("reason", "back")
	oneTask := func() error {
		id := strings.TrimSpace(f.Get("id"))
		if !task.ValidID(id) {
			return fmt.Errorf("%q is not a valid task id.", id)
		}
		if _, err := s.c.Get(ctx, id); err != nil {
			return fmt.Errorf("task %s: %v.", id, err)
		}
		p.IDs = []string{id}
		keep("id")
		return nil
	}
	switch action {
	case actCancel:
		if err := oneTask(); err != nil {
			return nil, err
		}
		p.Summary = "Cancel task " + p.IDs[0] + " (a running handler has its context cancelled)."
	case actApprove, actReject:
		if err := oneTask(); err != nil {
			return nil, err
		}
		t, err := s.c.Get(ctx, p.IDs[0])
		if err != nil {
			return nil, fmt.Errorf("task %s: %v.", p.IDs[0], err)
		}
		if !awaitingEvent(t) {
			return nil, fmt.Errorf("task %s is %s and not an event task waiting for its event: only such a task can be approved or rejected.", t.ID, t.State)
		}
		if action == actApprove {
			p.Summary = "Approve task " + t.ID + " in place of its event " + t.WaitFor.EventSubject() + ": it succeeds with the approval (your name, the reason, the time) as its result, which its dependents read."
		} else {
			p.Summary = "Reject task " + t.ID + ": it fails for good (no retry) with the error \"rejected by console:<you>: <reason>\"; its dependents that need it to succeed are cancelled, its any_failed ones run."
		}
	case actRerun:
		if err := oneTask(); err != nil {
			return nil, err
		}
		p.Summary = "Force a re-run of task " + p.IDs[0] + ": a new task with the same spec, id " + p.IDs[0] + "-rerun-<n>, runs its handler again."
	case actRedrive:
		if err := s.resolveRedrive(ctx, f, p, keep); err != nil {
			return nil, err
		}
	case actDLQDiscard:
		if err := s.resolveDiscard(ctx, f, p, keep); err != nil {
			return nil, err
		}
	case actPause, actResume:
		typ := strings.TrimSpace(f.Get("type"))
		if typ != "" && !task.ValidType(typ) {
			return nil, fmt.Errorf("%q is not a valid task type.", typ)
		}
		p.Scope = typ
		keep("type")
		what := "every task type"
		if typ != "" {
			what = "task type " + typ
		}
		if action == actPause {
			p.RetriesOnly = f.Get("retries_only") == "on" || f.Get("retries_only") == "true"
			keep("retries_only")
			p.Summary = "Pause dispatch of " + what + ": its new tasks and retries wait (visibly, \"held\") until resumed."
			if p.RetriesOnly {
				p.Summary = "Pause retries of " + what + ": new tasks still run, retries wait until resumed."
			}
		} else {
			p.Summary = "Resume " + what + " and release the tasks its pause held."
		}
	case actScheduleSave:
		if err := s.resolveScheduleSave(ctx, f, p, keep); err != nil {
			return nil, err
		}
	case actScheduleDelete:
		if err := s.resolveScheduleDelete(ctx, f, p, keep); err != nil {
			return nil, err
		}
	case actSchedulePause, actScheduleResume, actScheduleRun:
		name := strings.TrimSpace(f.Get("name"))
		if _, err := s.c.Schedule(ctx, name); err != nil || name == "" {
			return nil, fmt.Errorf("no schedule is named %q.", name)
		}
		p.Scope = name
		keep("name")
		p.Summary = map[string]string{
			actSchedulePause:  "Pause schedule " + name + ": it does not fire until resumed.",
			actScheduleResume: "Resume schedule " + name + ": it fires again from its next slot.",
			actScheduleRun:    "Fire schedule " + name + " now: submit its template as task " + name + "-manual-<time> (its regular firings do not change).",
		}[action]
	default:
		return nil, fmt.Errorf("there is no action %q.", action)
	}
	return p, nil
}

// resolveRedrive resolves a re-drive: of the ids given, of a dead-letter
// group, or of every failed task matching a search; with canary=N, only the
// first N of them.
func (s *Server) resolveRedrive(ctx context.Context, f url.Values, p *plan, keep func(...string)) error {
	canary := 0
	if c := strings.TrimSpace(f.Get("canary")); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > maxBulk {
			return fmt.Errorf("canary %q is not 1–%d.", c, maxBulk)
		}
		canary = n
		keep("canary")
	}
	var what string
	switch {
	case f.Get("group") != "":
		var err error
		if p.IDs, what, err = s.groupPlan(ctx, f.Get("group"), "already re-driven?"); err != nil {
			return err
		}
		keep("group")
	case f.Has("search"):
		q, err := url.ParseQuery(f.Get("search"))
		if err != nil {
			return fmt.Errorf("the search is malformed: %v.", err)
		}
		q.Set("state", string(task.Failed))
		sp, err := parseSearch(q)
		if err != nil {
			return fmt.Errorf("bad search: %v.", err)
		}
		if p.IDs, err = s.searchIDs(ctx, sp, maxBulk); err != nil {
			return err
		}
		if len(p.IDs) == 0 {
			return fmt.Errorf("no failed task matches the search.")
		}
		what = fmt.Sprintf("the %d failed tasks matching the search (at most %d)", len(p.IDs), maxBulk)
		keep("search")
	default:
		seen := map[string]bool{}
		for _, id := range f["id"] {
			id = strings.TrimSpace(id)
			if !task.ValidID(id) {
				return fmt.Errorf("%q is not a valid task id.", id)
			}
			if !seen[id] {
				seen[id] = true
				p.IDs = append(p.IDs, id)
			}
		}
		if len(p.IDs) == 0 {
			return fmt.Errorf("no task was selected.")
		}
		if len(p.IDs) > maxBulk {
			return fmt.Errorf("%d tasks selected; at most %d at once.", len(p.IDs), maxBulk)
		}
		what = fmt.Sprintf("%d selected task(s)", len(p.IDs))
		if len(p.IDs) == 1 {
			if _, err := s.c.Get(ctx, p.IDs[0]); err != nil {
				return fmt.Errorf("task %s: %v.", p.IDs[0], err)
			}
			what = "task " + p.IDs[0]
		}
		keep("id")
	}
	if canary > 0 && canary < len(p.IDs) {
		p.IDs = p.IDs[:canary]
		what = fmt.Sprintf("a canary of the first %d of %s", canary, what)
	}
	p.Summary = "Re-drive " + what + ": each starts a fresh series of attempts."
	if p.WithDependents = f.Get("with_dependents") == "yes"; p.WithDependents {
		p.Summary += " The dependents its failure cancelled are re-opened under their ids."
	}
	return nil
}

// carryOut runs a plan's commands and records each as an audit event.
func (s *Server) carryOut(ctx context.Context, u user, p *plan) []outcome {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	by := "by " + u.Name + " via the console"
	reason := by
	if p.Reason != "" {
		reason = p.Reason + " (" + by + ")"
	}
	record := func(key, from, to, detail string) {
		ev := task.AuditEvent{Kind: sdk.AuditOperator, Key: key, From: from, To: to, At: s.now().UTC(), Actor: "console:" + u.Name, Reason: detail}
		if err := s.c.RecordAudit(ctx, ev); err != nil {
			s.log.Warn().Err(err).Str("action", p.Action).Msg("audit event not recorded")
		}
	}
	switch p.Action {
	case actCancel, actRedrive, actRerun, actDLQDiscard, actApprove, actReject:
		out := make([]outcome, len(p.IDs))
		var wg sync.WaitGroup
		sem := make(chan struct{}, bulkWorkers)
		for i, id := range p.IDs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				out[i] = s.taskCommand(ctx, u, p, id, reason)
				if out[i].OK {
					record(id, "", p.Action, reason+": "+out[i].Detail)
				}
			}()
		}
		wg.Wait()
		sort.SliceStable(out, func(i, j int) bool { return !out[i].OK && out[j].OK })
		return out
	case actPause, actResume:
		key := p.Scope
		if key == "" {
			key = "all"
		}
		var err error
		if p.Action == actPause {
			err = s.c.Pause(ctx, p.Scope, p.RetriesOnly, reason)
		} else {
			err = s.c.Resume(ctx, p.Scope, reason)
		}
		o := outcome{Target: "task type " + key, OK: err == nil, Detail: p.Action + "d", Link: "/"}
		if err != nil {
			o.Detail = err.Error()
		} else {
			record(key, "", p.Action, reason)
		}
		return []outcome{o}
	default: // schedules
		var err error
		detail := ""
		switch p.Action {
		case actScheduleSave:
			var saved *task.Schedule
			if saved, err = s.c.CreateSchedule(ctx, *p.Schedule); err == nil {
				detail = "saved"
				if saved.NextFire != nil {
					detail += "; next firing " + saved.NextFire.UTC().Format(time.RFC3339)
				}
			}
		case actScheduleDelete:
			err = s.c.DeleteSchedule(ctx, p.Scope)
			detail = "deleted"
		case actSchedulePause:
			_, err = s.c.PauseSchedule(ctx, p.Scope)
			detail = "paused"
		case actScheduleResume:
			_, err = s.c.ResumeSchedule(ctx, p.Scope)
			detail = "resumed"
		case actScheduleRun:
			var id string
			id, err = s.c.TriggerSchedule(ctx, p.Scope, s.now())
			detail = "submitted task " + id
			if err == nil {
				o := outcome{Target: "schedule " + p.Scope, OK: true, Detail: detail, Link: "/task/" + escapeID(id)}
				record("schedule="+p.Scope, "", p.Action, reason+": "+detail)
				return []outcome{o}
			}
		}
		o := outcome{Target: "schedule " + p.Scope, OK: err == nil, Detail: detail, Link: "/schedules"}
		if err != nil {
			o.Detail = err.Error()
		} else {
			record("schedule="+p.Scope, "", p.Action, reason)
		}
		return []outcome{o}
	}
}

func (s *Server) taskCommand(ctx context.Context, u user, p *plan, id, reason string) outcome {
	o := outcome{Target: id, Link: "/task/" + escapeID(id)}
	var t *task.Task
	var err error
	switch p.Action {
	case actCancel:
		t, err = s.c.Cancel(ctx, id, reason)
	case actRedrive:
		opts := []sdk.RedriveOption{sdk.By("console:" + u.Name)}
		if p.WithDependents {
			opts = append(opts, sdk.WithDependents())
		}
		t, err = s.c.RedriveWithReason(ctx, id, reason, opts...)
	case actDLQDiscard:
		if err = s.c.DiscardDeadLetter(ctx, id, reason); err == nil {
			o.OK, o.Detail, o.Link = true, "dead letter discarded; the task stays failed", "/task/"+escapeID(id)
			return o
		}
	case actApprove, actReject:
		// The operator's own reason; who decided is the console's user,
		// recorded as the command's by.
		t, err = s.c.Approve(ctx, id, sdk.ApproveOptions{Reject: p.Action == actReject, Reason: p.Reason, By: "console:" + u.Name})
		if err == nil {
			o.OK, o.Detail = true, "now "+string(t.State)+": "+t.Reason
			return o
		}
	case actRerun:
		var nid string
		nid, err = s.c.Rerun(ctx, id)
		if err == nil {
			o.OK, o.Detail, o.Link = true, "re-run as "+nid, "/task/"+escapeID(nid)
			return o
		}
	}
	if err != nil {
		o.Detail = err.Error()
		return o
	}
	o.OK = true
	o.Detail = "now " + string(t.State)
	return o
}

// awaitingEvent reports whether t is an event task waiting for its event
// (lifecycle.AwaitingEvent): the tasks an operator may approve or reject.
func awaitingEvent(t *task.Task) bool {
	return t.WaitFor != nil && t.State == task.Waiting && t.EventWaitSince != nil
}
