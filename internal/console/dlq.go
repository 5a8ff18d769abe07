package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ax-run/ax/task"
)

// DLQGroup is the dead letters of one task type with one normalised error.
type DLQGroup struct {
	Type    string
	Error   string
	Count   int
	First   time.Time
	Last    time.Time
	Samples []string
	// Key identifies the group in a re-drive form.
	Key string
}

// maxSamples is how many ids a group lists.
const maxSamples = 5

var (
	reUUID   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	reULID   = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)
	reHex    = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b`)
	reQuoted = regexp.MustCompile(`"[^"]*"|'[^']*'`)
	reNumber = regexp.MustCompile(`\d+`)
	reSpace  = regexp.MustCompile(`\s+`)
)

// normalizeError turns an error message into its pattern, so failures that
// differ only in ids, numbers or quoted values group together.
func normalizeError(s string) string {
	s = reUUID.ReplaceAllString(s, "<id>")
	s = reULID.ReplaceAllString(s, "<id>")
	s = reHex.ReplaceAllString(s, "<hex>")
	s = reQuoted.ReplaceAllString(s, "<…>")
	s = reNumber.ReplaceAllString(s, "<n>")
	s = reSpace.ReplaceAllString(strings.TrimSpace(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "(no error message)"
	}
	return s
}

// deadLetterError is the error a dead letter is grouped by: its last
// attempt's, or the reason it failed without one.
func deadLetterError(d task.DeadLetter) string {
	if n := len(d.Attempts); n > 0 && d.Attempts[n-1].Error != "" {
		return d.Attempts[n-1].Error
	}
	return d.Reason
}

// groupKey identifies a group: a task type never contains "|".
func groupKey(typ, pattern string) string { return typ + "|" + pattern }

// dlqGroups groups the dead letters, largest group first.
func dlqGroups(dls []task.DeadLetter) []DLQGroup {
	byKey := map[string]*DLQGroup{}
	for _, d := range dls {
		pat := normalizeError(deadLetterError(d))
		k := groupKey(d.Spec.Type, pat)
		g := byKey[k]
		if g == nil {
			g = &DLQGroup{Type: d.Spec.Type, Error: pat, First: d.FailedAt, Last: d.FailedAt, Key: k}
			byKey[k] = g
		}
		g.Count++
		if d.FailedAt.Before(g.First) {
			g.First = d.FailedAt
		}
		if d.FailedAt.After(g.Last) {
			g.Last = d.FailedAt
		}
		if len(g.Samples) < maxSamples {
			g.Samples = append(g.Samples, d.Spec.ID)
		}
	}
	out := make([]DLQGroup, 0, len(byKey))
	for _, g := range byKey {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// groupPlan returns the ids of the dead letters in a group for an action
// on them, and what they are in words; an error when it is empty now
// (emptyWhy guesses why).
func (s *Server) groupPlan(ctx context.Context, group, emptyWhy string) ([]string, string, error) {
	ids, err := s.groupIDs(ctx, group)
	if err != nil {
		return nil, "", err
	}
	if len(ids) == 0 {
		return nil, "", fmt.Errorf("the dead-letter group is empty now (%s).", emptyWhy)
	}
	typ, pattern, _ := strings.Cut(group, "|")
	return ids, fmt.Sprintf("the %d dead letters of type %s failing with %q", len(ids), typ, pattern), nil
}

// groupIDs returns the ids of the dead letters in a group, oldest first.
func (s *Server) groupIDs(ctx context.Context, key string) ([]string, error) {
	dls, err := s.c.DeadLetters(ctx)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(dls, func(i, j int) bool { return dls[i].FailedAt.Before(dls[j].FailedAt) })
	var ids []string
	for _, d := range dls {
		if groupKey(d.Spec.Type, normalizeError(deadLetterError(d))) == key {
			ids = append(ids, d.Spec.ID)
		}
	}
	return ids, nil
}

func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request, v *visit) {
	dls, err := s.c.DeadLetters(r.Context())
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Dead letters unavailable", err.Error())
		return
	}
	typ := strings.TrimSpace(r.URL.Query().Get("type"))
	if typ != "" && !task.ValidType(typ) {
		s.fail(w, r, v, http.StatusBadRequest, "Bad filter", "type "+typ+" is not a valid task type")
		return
	}
	var shown []task.DeadLetter
	for _, d := range dls {
		if typ == "" || d.Spec.Type == typ {
			shown = append(shown, d)
		}
	}
	sort.Slice(shown, func(i, j int) bool { return shown[i].FailedAt.After(shown[j].FailedAt) })
	type letter struct {
		task.DeadLetter
		Error string
	}
	var letters []letter
	for i, d := range shown {
		if i >= 200 {
			break
		}
		letters = append(letters, letter{d, deadLetterError(d)})
	}
	s.render(w, r, v, http.StatusOK, "dlq", map[string]any{"Title": "Dead letters", "Groups": dlqGroups(shown),
		"Letters": letters, "Total": len(shown), "Type": typ})
}

func (s *Server) handleRejected(w http.ResponseWriter, r *http.Request, v *visit) {
	rs, err := s.c.Rejections(r.Context(), 200)
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Rejections unavailable", err.Error())
		return
	}
	for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
		rs[i], rs[j] = rs[j], rs[i]
	}
	s.render(w, r, v, http.StatusOK, "rejected", map[string]any{"Title": "Rejected submissions", "Rejections": rs})
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request, v *visit) {
	ss, err := s.c.Schedules(r.Context())
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Schedules unavailable", err.Error())
		return
	}
	s.render(w, r, v, http.StatusOK, "schedules", map[string]any{"Title": "Schedules", "Schedules": ss, "Now": s.now()})
}

// resolveDiscard resolves a discard of dead letters: of the ids given (a
// selection), or of a dead-letter group; with canary=N, only the first N.
func (s *Server) resolveDiscard(ctx context.Context, f url.Values, p *plan, keep func(...string)) error {
	var what string
	switch {
	case f.Get("group") != "":
		var err error
		if p.IDs, what, err = s.groupPlan(ctx, f.Get("group"), "already re-driven or discarded?"); err != nil {
			return err
		}
		keep("group")
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
		switch {
		case len(p.IDs) == 0:
			return fmt.Errorf("no dead letter was selected.")
		case len(p.IDs) > maxBulk:
			return fmt.Errorf("%d dead letters selected; at most %d at once.", len(p.IDs), maxBulk)
		case len(p.IDs) == 1:
			what = "the dead letter of task " + p.IDs[0]
		default:
			what = fmt.Sprintf("%d selected dead letters", len(p.IDs))
		}
		keep("id")
	}
	p.Summary = "Discard " + what + " for good: they leave the dead-letter queue (recorded in the audit trail); their tasks stay failed and can still be re-driven from their pages."
	return nil
}
