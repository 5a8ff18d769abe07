package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// Search limits.
const (
	defaultPageSize = 50
	maxPageSize     = 200
	// maxBulk bounds the tasks one bulk action touches.
	maxBulk = 1000
	// maxPrefixIDs bounds the ids a JetStream prefix search reads.
	maxPrefixIDs = 2000
	// errorSearchWindow is how far back an error-text search of the
	// mirror looks when no time range is given.
	errorSearchWindow = 24 * time.Hour
)

// searchParams is a search as given in the URL (shareable).
type searchParams struct {
	ID, Prefix, Type, State, Capability, Error string
	Priority                                   int // -1: any
	From, To                                   time.Time
	Sort                                       string
	Asc                                        bool
	Page, Limit                                int
}

// timeLayouts are accepted for from and to: RFC 3339 and the browser's
// datetime-local input (read as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

func parseTime(name, v string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time (use 2006-01-02T15:04 or RFC 3339)", name, v)
}

// parseSearch validates a search's URL parameters.
func parseSearch(q url.Values) (searchParams, error) {
	p := searchParams{Priority: -1, Page: 1, Limit: defaultPageSize}
	get := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	p.ID, p.Prefix, p.Type, p.State, p.Capability, p.Error = get("id"), get("prefix"), get("type"), get("state"), get("capability"), get("error")
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if p.ID != "" && !task.ValidID(p.ID) {
		bad("id %q is not a valid task id", p.ID)
	}
	if p.Prefix != "" && (len(p.Prefix) > 128 || strings.ContainsAny(p.Prefix, ". *>")) {
		bad("id prefix %q has characters no task id has", p.Prefix)
	}
	if p.Type != "" && !task.ValidType(p.Type) {
		bad("type %q is not a valid task type", p.Type)
	}
	if p.State != "" && !task.State(p.State).Valid() {
		bad("state %q is not one of %v", p.State, task.States())
	}
	if p.Capability != "" && !task.ValidCapability(p.Capability) {
		bad("capability %q is not a valid capability", p.Capability)
	}
	if len(p.Error) > 200 {
		bad("error text is longer than 200 characters")
	}
	if v := get("priority"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > task.MaxPriority {
			bad("priority %q is not 0–5", v)
		}
		p.Priority = n
	}
	var err error
	if v := get("from"); v != "" {
		if p.From, err = parseTime("from", v); err != nil {
			bad("%v", err)
		}
	}
	if v := get("to"); v != "" {
		if p.To, err = parseTime("to", v); err != nil {
			bad("%v", err)
		}
	}
	if !p.From.IsZero() && !p.To.IsZero() && !p.From.Before(p.To) {
		bad("from must be before to")
	}
	switch p.Sort = get("sort"); p.Sort {
	case "", audit.SortUpdated, audit.SortID, audit.SortStateSince:
	default:
		bad("sort %q is not updated, id or state_since", p.Sort)
	}
	switch get("order") {
	case "", "desc":
	case "asc":
		p.Asc = true
	default:
		bad("order %q is not asc or desc", get("order"))
	}
	if v := get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			bad("page %q is not a positive number", v)
		}
		p.Page = n
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPageSize {
			bad("limit %q is not 1–%d", v, maxPageSize)
		}
		p.Limit = n
	}
	if (p.Page-1)*p.Limit > audit.MaxSearchOffset {
		bad("page %d is too deep: narrow the search instead", p.Page)
	}
	if len(errs) > 0 {
		return p, errors.New(strings.Join(errs, "; "))
	}
	return p, nil
}

// values returns the search as URL parameters (for links and forms).
func (p searchParams) values() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("id", p.ID)
	set("prefix", p.Prefix)
	set("type", p.Type)
	set("state", p.State)
	set("capability", p.Capability)
	set("error", p.Error)
	if p.Priority >= 0 {
		q.Set("priority", strconv.Itoa(p.Priority))
	}
	if !p.From.IsZero() {
		q.Set("from", p.From.UTC().Format(time.RFC3339))
	}
	if !p.To.IsZero() {
		q.Set("to", p.To.UTC().Format(time.RFC3339))
	}
	set("sort", p.Sort)
	if p.Asc {
		q.Set("order", "asc")
	}
	if p.Limit != defaultPageSize {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	return q
}

func (p searchParams) empty() bool {
	return p.ID == "" && p.Prefix == "" && p.Type == "" && p.State == "" && p.Capability == "" && p.Error == "" &&
		p.Priority < 0 && p.From.IsZero() && p.To.IsZero()
}

// Row is one task in a list.
type Row struct {
	ID         string
	Type       string
	State      string
	Priority   int
	Capability string
	Attempt    int
	MaxRetries int
	Executor   string
	Note       string
	Updated    time.Time
	Since      time.Time
}

func rowFromAudit(t audit.Task) Row {
	note := t.LastError
	if note == "" {
		note = t.Reason
	}
	return Row{ID: t.ID, Type: t.Type, State: t.State, Priority: t.Priority, Capability: t.Capability, Attempt: t.Attempt,
		MaxRetries: t.MaxRetries, Executor: t.Executor, Note: note, Updated: t.UpdatedAt, Since: t.StateSince}
}

func rowFromTask(t task.Task) Row {
	note := t.Reason
	if n := len(t.Errors); n > 0 && (t.State == task.Failed || t.State == task.Retrying) {
		note = t.Errors[n-1].Error
	}
	return Row{ID: t.ID, Type: t.Type, State: string(t.State), Priority: t.PriorityLevel(), Capability: t.Capability, Attempt: t.Attempt,
		MaxRetries: t.RetryLimit(), Executor: t.Executor, Note: note, Updated: t.UpdatedAt, Since: t.UpdatedAt}
}

// searchResult is a page of rows and where they came from.
type searchResult struct {
	Rows []Row
	More bool
	// Source explains the data: the mirror, or which part of JetStream.
	Source string
}

// search runs p against the mirror when there is one, else JetStream.
func (s *Server) search(ctx context.Context, p searchParams) (searchResult, error) {
	if s.cfg.Auditor != nil {
		q := audit.SearchQuery{ID: p.ID, IDPrefix: p.Prefix, Type: p.Type, State: p.State, Capability: p.Capability,
			Priority: p.Priority, Since: p.From, Until: p.To, Error: p.Error, Sort: p.Sort, Asc: p.Asc,
			Offset: (p.Page - 1) * p.Limit, Limit: p.Limit}
		source := "the MySQL mirror (every task)"
		if q.Error != "" && q.Since.IsZero() && q.ID == "" && q.IDPrefix == "" {
			// A "contains" search reads every row it considers: bound it.
			q.Since = s.now().Add(-errorSearchWindow)
			if q.Sort == "" {
				q.Sort = audit.SortUpdated // along ax_tasks_updated, within the window
			}
			source = fmt.Sprintf("the MySQL mirror (error text searched in tasks changed in the last %s; give a time range to search further back)", errorSearchWindow)
		}
		r, err := s.cfg.Auditor.Search(ctx, q)
		if err != nil {
			return searchResult{}, err
		}
		out := searchResult{More: r.More, Source: source}
		for _, t := range r.Tasks {
			out.Rows = append(out.Rows, rowFromAudit(t))
		}
		return out, nil
	}
	tasks, source, err := s.jetStreamCandidates(ctx, p)
	if err != nil {
		return searchResult{}, err
	}
	var rows []Row
	for _, t := range tasks {
		if matches(p, t) {
			rows = append(rows, rowFromTask(t))
		}
	}
	sortRows(rows, p)
	out := searchResult{Source: source}
	from := (p.Page - 1) * p.Limit
	if from < len(rows) {
		end := min(from+p.Limit, len(rows))
		out.Rows, out.More = rows[from:end], end < len(rows)
	}
	return out, nil
}

// jetStreamCandidates returns the tasks a search without the mirror looks
// at: the id, the ids with the prefix, or the tasks of the newest events.
func (s *Server) jetStreamCandidates(ctx context.Context, p searchParams) ([]task.Task, string, error) {
	switch {
	case p.ID != "":
		t, err := s.c.Get(ctx, p.ID)
		if errors.Is(err, sdk.ErrNotFound) || isRejected(err) {
			return nil, "JetStream (the task's history)", nil
		}
		if err != nil {
			return nil, "", err
		}
		return []task.Task{*t}, "JetStream (the task's history)", nil
	case p.Prefix != "":
		ids, err := s.c.TaskIDs(ctx, p.Prefix)
		if err != nil {
			return nil, "", err
		}
		source := "JetStream (every task whose id has the prefix)"
		if len(ids) > maxPrefixIDs {
			ids = ids[len(ids)-maxPrefixIDs:]
			source = fmt.Sprintf("JetStream (the last %d ids with the prefix)", maxPrefixIDs)
		}
		out := make([]task.Task, 0, len(ids))
		for _, id := range ids {
			if t, err := s.c.Get(ctx, id); err == nil {
				out = append(out, *t)
			}
		}
		return out, source, nil
	}
	out, err := s.recentTasks(ctx, s.cfg.RecentEvents)
	return out, fmt.Sprintf("JetStream: tasks changed in the newest %d events (run the console with --mysql-dsn to search every task)", s.cfg.RecentEvents), err
}

// recentTasks reads the newest n events of AX_TASKS and returns the latest
// record of each task in them.
func (s *Server) recentTasks(ctx context.Context, n int) ([]task.Task, error) {
	st, err := s.js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	start := info.State.FirstSeq
	if info.State.LastSeq >= uint64(n) && info.State.LastSeq-uint64(n)+1 > start {
		start = info.State.LastSeq - uint64(n) + 1
	}
	cons, done, err := scan.Open(ctx, s.js, subject.StreamTasks, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return nil, err
	}
	defer done()
	latest := map[string]task.Task{}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		got, last := 0, false
		for msg := range batch.Messages() {
			got++
			var ev task.Event
			if json.Unmarshal(msg.Data(), &ev) == nil {
				latest[ev.Task.ID] = ev.Task
			}
			if md, err := msg.Metadata(); err != nil || md.NumPending == 0 || md.Sequence.Stream >= info.State.LastSeq {
				last = true
			}
		}
		if last || got == 0 {
			break
		}
	}
	out := make([]task.Task, 0, len(latest))
	for _, t := range latest {
		out = append(out, t)
	}
	return out, nil
}

// matches applies a search's filters to a record (JetStream searches).
func matches(p searchParams, t task.Task) bool {
	switch {
	case p.ID != "" && t.ID != p.ID,
		p.Prefix != "" && !strings.HasPrefix(t.ID, p.Prefix),
		p.Type != "" && t.Type != p.Type,
		p.State != "" && string(t.State) != p.State,
		p.Capability != "" && t.Capability != p.Capability,
		p.Priority >= 0 && t.PriorityLevel() != p.Priority,
		!p.From.IsZero() && t.UpdatedAt.Before(p.From),
		!p.To.IsZero() && !t.UpdatedAt.Before(p.To):
		return false
	}
	if p.Error != "" {
		hay := t.Reason
		for _, e := range t.Errors {
			hay += "\n" + e.Error
		}
		return strings.Contains(hay, p.Error)
	}
	return true
}

func sortRows(rows []Row, p searchParams) {
	less := func(a, b Row) bool {
		switch p.Sort {
		case audit.SortID:
			return a.ID < b.ID
		case audit.SortStateSince, "":
			if p.Sort == "" && p.State == "" {
				if !a.Updated.Equal(b.Updated) {
					return a.Updated.Before(b.Updated)
				}
				break
			}
			if !a.Since.Equal(b.Since) {
				return a.Since.Before(b.Since)
			}
		default:
			if !a.Updated.Equal(b.Updated) {
				return a.Updated.Before(b.Updated)
			}
		}
		return a.ID < b.ID
	}
	sort.Slice(rows, func(i, j int) bool {
		if p.Asc {
			return less(rows[i], rows[j])
		}
		return less(rows[j], rows[i])
	})
}

// searchIDs resolves a search to the ids it matches, up to limit (bulk
// actions), paging through the results.
func (s *Server) searchIDs(ctx context.Context, p searchParams, limit int) ([]string, error) {
	p.Limit, p.Page = maxPageSize, 1
	var ids []string
	for len(ids) < limit {
		r, err := s.search(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, row := range r.Rows {
			if len(ids) < limit {
				ids = append(ids, row.ID)
			}
		}
		if !r.More || (p.Page*p.Limit) > audit.MaxSearchOffset {
			break
		}
		p.Page++
	}
	return ids, nil
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request, v *visit) {
	p, err := parseSearch(r.URL.Query())
	if err != nil {
		s.fail(w, r, v, http.StatusBadRequest, "Bad search", err.Error())
		return
	}
	res, err := s.search(r.Context(), p)
	if err != nil {
		s.fail(w, r, v, http.StatusBadGateway, "Search failed", err.Error())
		return
	}
	page := func(n int) string {
		q := p.values()
		if n > 1 {
			q.Set("page", strconv.Itoa(n))
		}
		return "/tasks?" + q.Encode()
	}
	sortLink := func(key string) string {
		q := p.values()
		cur := p.Sort
		switch {
		case cur == "" && p.State != "":
			cur = audit.SortStateSince
		case cur == "":
			cur = audit.SortUpdated
		}
		q.Set("sort", key)
		q.Del("order")
		if cur == key && !p.Asc {
			q.Set("order", "asc")
		}
		return "/tasks?" + q.Encode()
	}
	data := map[string]any{
		"Title": "Tasks", "P": p, "R": res, "States": task.States(), "Query": p.values().Encode(), "Self": "/tasks?" + p.values().Encode(),
		"Prev": "", "Next": "", "SortUpdated": sortLink(audit.SortUpdated), "SortID": sortLink(audit.SortID),
		"SortSince": sortLink(audit.SortStateSince), "Empty": p.empty(),
		"From": fmtInput(p.From), "To": fmtInput(p.To), "Failed": p.State == string(task.Failed), "MaxBulk": maxBulk,
		"Priorities": []int{0, 1, 2, 3, 4, 5},
	}
	if p.Page > 1 {
		data["Prev"] = page(p.Page - 1)
	}
	if res.More {
		data["Next"] = page(p.Page + 1)
	}
	s.render(w, r, v, http.StatusOK, "search", data)
}

func fmtInput(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04")
}

func isRejected(err error) bool {
	var rej *sdk.RejectedError
	return errors.As(err, &rej)
}
