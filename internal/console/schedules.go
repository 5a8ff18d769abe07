package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ax-run/ax/internal/cronspec"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Schedules are managed in the console: a form creates one or edits one
// (a schedule-save replaces it whole, as `ax schedule create` does), a
// delete removes it; both go through a confirmation page and are recorded
// in the audit trail (the orchestrator's event of kind schedule, and the
// console's of kind operator naming who).

// Schedule actions (POST /actions/<name>).
const (
	actScheduleSave   = "schedule-save"
	actScheduleDelete = "schedule-delete"
)

// scheduleForm is what the schedule form shows: a schedule as editable
// text.
type scheduleForm struct {
	Name, Cron, TimeZone, Type, Payload, Capability, Overlap string
	Priority, MaxRetries                                     int
	Timeout, TTL                                             string
	CatchUp, Paused                                          bool
	// Graph is a graph schedule's {"tasks":[…]} (Type is then empty).
	Graph string
	// Editing: the schedule exists (its name is fixed).
	Editing bool
}

func formOf(s *task.Schedule) scheduleForm {
	f := scheduleForm{Name: s.Name, Cron: s.Cron, TimeZone: s.TimeZone, Type: s.Template.Type, Capability: s.Template.Capability,
		Overlap: s.Overlap, Priority: s.Template.PriorityLevel(), MaxRetries: s.Template.RetryLimit(),
		CatchUp: s.CatchUp, Paused: s.Paused, Editing: true}
	if len(s.Template.Payload) > 0 {
		f.Payload = string(s.Template.Payload)
	}
	if s.Template.Timeout > 0 {
		f.Timeout = s.Template.Timeout.Std().String()
	}
	if s.Template.TTL > 0 {
		f.TTL = s.Template.TTL.Std().String()
	}
	if len(s.Graph) > 0 {
		b, _ := json.MarshalIndent(task.Graph{Tasks: s.Graph}, "", "  ")
		f.Graph, f.Type = string(b), ""
	}
	return f
}

// handleScheduleForm is GET /schedules/new and /schedules/edit?name=N.
func (s *Server) handleScheduleForm(w http.ResponseWriter, r *http.Request, v *visit) {
	f := scheduleForm{Priority: task.DefaultPriority, MaxRetries: task.DefaultMaxRetries, Capability: task.DefaultCapability, Overlap: task.OverlapSkip}
	title := "New schedule"
	if name := r.URL.Query().Get("name"); name != "" {
		sc, err := s.c.Schedule(r.Context(), name)
		if errors.Is(err, sdk.ErrScheduleNotFound) {
			s.fail(w, r, v, http.StatusNotFound, "Schedule not found", fmt.Sprintf("No schedule is named %q.", name))
			return
		}
		if err != nil {
			s.fail(w, r, v, http.StatusBadGateway, "Schedule unavailable", err.Error())
			return
		}
		f, title = formOf(sc), "Edit schedule "+name
	}
	s.render(w, r, v, http.StatusOK, "schedule_form", map[string]any{"Title": title, "F": f})
}

// resolveScheduleSave reads the schedule form into a schedule and checks
// it as the orchestrator will (its definition and cron).
func (s *Server) resolveScheduleSave(ctx context.Context, f url.Values, p *plan, keep func(...string)) error {
	keep("name", "cron", "time_zone", "type", "payload", "priority", "capability", "max_retries", "timeout", "ttl", "overlap", "catch_up", "paused", "graph")
	get := func(k string) string { return strings.TrimSpace(f.Get(k)) }
	sc := task.Schedule{Name: get("name"), Cron: get("cron"), TimeZone: get("time_zone"), Overlap: get("overlap"),
		CatchUp: f.Get("catch_up") == "on", Paused: f.Get("paused") == "on"}
	if g := get("graph"); g != "" {
		if get("type") != "" {
			return fmt.Errorf("give a task type or a graph, not both.")
		}
		graph, err := task.DecodeGraph([]byte(g))
		if err != nil {
			return fmt.Errorf("the graph is not a graph {\"tasks\":[…]}: %v.", err)
		}
		sc.Graph = graph.Tasks
	} else {
		t := task.Spec{Type: get("type"), Capability: get("capability")}
		if pl := get("payload"); pl != "" {
			if !json.Valid([]byte(pl)) {
				return fmt.Errorf("the payload is not JSON.")
			}
			t.Payload = json.RawMessage(pl)
		}
		for _, n := range []struct {
			field string
			dst   **int
		}{{"priority", &t.Priority}, {"max_retries", &t.MaxRetries}} {
			if v := get(n.field); v != "" {
				i, err := strconv.Atoi(v)
				if err != nil {
					return fmt.Errorf("%s %q is not a number.", n.field, v)
				}
				*n.dst = &i
			}
		}
		for _, d := range []struct {
			field string
			dst   *task.Duration
		}{{"timeout", &t.Timeout}, {"ttl", &t.TTL}} {
			if v := get(d.field); v != "" {
				dur, err := time.ParseDuration(v)
				if err != nil {
					return fmt.Errorf("%s %q is not a duration (30s, 5m, 1h).", d.field, v)
				}
				*d.dst = task.Duration(dur)
			}
		}
		sc.Template = t
	}
	if err := sc.ValidateDefinition(0); err != nil {
		return fmt.Errorf("the schedule is not valid: %v.", err)
	}
	cron, err := cronspec.Parse(sc.Cron, sc.TimeZone)
	if err != nil {
		return fmt.Errorf("the cron is not valid: %v.", err)
	}
	verb := "Create"
	if _, err := s.c.Schedule(ctx, sc.Name); err == nil {
		verb = "Replace"
	}
	what := "a task of type " + sc.Template.Type
	if len(sc.Graph) > 0 {
		what = fmt.Sprintf("a graph of %d tasks", len(sc.Graph))
	}
	zone := sc.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	state := fmt.Sprintf("next firing %s", cron.Next(s.now()).UTC().Format(time.RFC3339))
	if sc.Paused {
		state = "paused"
	}
	p.Scope, p.Schedule = sc.Name, &sc
	p.Summary = fmt.Sprintf("%s schedule %s: %s each firing of %q (%s), overlap %s; %s.", verb, sc.Name, what, sc.Cron, zone, orDefault(sc.Overlap, task.OverlapSkip), state)
	p.Back = "/schedules"
	return nil
}

// resolveScheduleDelete checks the schedule to delete exists.
func (s *Server) resolveScheduleDelete(ctx context.Context, f url.Values, p *plan, keep func(...string)) error {
	name := strings.TrimSpace(f.Get("name"))
	if _, err := s.c.Schedule(ctx, name); err != nil || name == "" {
		return fmt.Errorf("no schedule is named %q.", name)
	}
	keep("name")
	p.Scope = name
	p.Summary = "Delete schedule " + name + ": it fires no more (the tasks it created stay)."
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
