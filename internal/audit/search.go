package audit

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Search sort keys, each served by an index of ax_tasks (see SearchQuery).
const (
	SortUpdated    = "updated"     // ax_tasks_updated (updated_at)
	SortID         = "id"          // the primary key (ULIDs sort by creation time)
	SortStateSince = "state_since" // ax_tasks_state (state, state_since) when a state is given
)

// MaxSearchLimit bounds a search page; MaxSearchOffset how deep pages go
// (deeper pages are better served by narrower filters).
const (
	MaxSearchLimit  = 500
	MaxSearchOffset = 10000
)

// SearchQuery selects tasks in the mirror. Empty fields do not filter.
//
// Indexes: ID and IDPrefix use the primary key; Type (with or without
// State) ax_tasks_type_state; State with a time range or SortStateSince
// ax_tasks_state; the default order ax_tasks_updated. Capability, Priority
// and Error filter the rows those indexes find: Error ("contains") scans
// last_error, so combine it with a type or state on large mirrors.
type SearchQuery struct {
	ID         string
	IDPrefix   string
	Type       string
	State      string
	Capability string
	// Priority filters when ≥ 0; -1 means any.
	Priority int
	// Since and Until bound updated_at (the last change); zero means open.
	Since, Until time.Time
	// Error matches tasks whose last error or reason contains it.
	Error string
	// Sort is SortUpdated, SortID or SortStateSince; empty means
	// SortStateSince when State is given (the ax_tasks_state index then
	// serves both the filter and the order) and SortUpdated otherwise. Asc
	// reverses the default newest-first order.
	Sort string
	Asc  bool
	// Offset and Limit page the result. Limit defaults to 50.
	Offset, Limit int
}

// SearchResult is one page of tasks; More says whether another page follows.
type SearchResult struct {
	Tasks []Task `json:"tasks"`
	More  bool   `json:"more"`
}

// Search returns one page of the tasks matching q.
func (a *Auditor) Search(ctx context.Context, q SearchQuery) (SearchResult, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	if q.Limit > MaxSearchLimit || q.Offset < 0 || q.Offset > MaxSearchOffset {
		return SearchResult{}, fmt.Errorf("search: limit must be 1–%d and offset 0–%d", MaxSearchLimit, MaxSearchOffset)
	}
	var where []string
	var args []any
	add := func(cond string, vals ...any) {
		where = append(where, cond)
		args = append(args, vals...)
	}
	if q.ID != "" {
		add("id = ?", q.ID)
	}
	if q.IDPrefix != "" {
		add("id LIKE ?", likePrefix(q.IDPrefix))
	}
	if q.Type != "" {
		add("type = ?", q.Type)
	}
	if q.State != "" {
		add("state = ?", q.State)
	}
	if q.Capability != "" {
		add("capability = ?", q.Capability)
	}
	if q.Priority >= 0 {
		add("priority = ?", q.Priority)
	}
	if !q.Since.IsZero() {
		add("updated_at >= ?", sqlTime(q.Since))
	}
	if !q.Until.IsZero() {
		add("updated_at < ?", sqlTime(q.Until))
	}
	if q.Error != "" {
		pat := "%" + escapeLike(q.Error) + "%"
		add("(last_error LIKE ? OR reason LIKE ?)", pat, pat)
	}
	dir := "DESC"
	if q.Asc {
		dir = "ASC"
	}
	order := "updated_at " + dir + ", id " + dir
	if q.Sort == "" && q.State != "" {
		q.Sort = SortStateSince
	}
	switch q.Sort {
	case "", SortUpdated:
	case SortID:
		order = "id " + dir
	case SortStateSince:
		order = "state_since " + dir + ", id " + dir
	default:
		return SearchResult{}, fmt.Errorf("search: unknown sort %q", q.Sort)
	}
	query := "SELECT " + taskColumns + " FROM ax_tasks"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY " + order + " LIMIT ? OFFSET ?"
	args = append(args, q.Limit+1, q.Offset)
	rows, err := a.db.QueryContext(ctx, query, args...)
	if err != nil {
		return SearchResult{}, fmt.Errorf("search tasks: %w", err)
	}
	defer rows.Close()
	var r SearchResult
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return r, fmt.Errorf("search tasks: %w", err)
		}
		r.Tasks = append(r.Tasks, t)
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("search tasks: %w", err)
	}
	if len(r.Tasks) > q.Limit {
		r.Tasks, r.More = r.Tasks[:q.Limit], true
	}
	return r, nil
}

// escapeLike escapes LIKE's wildcards (the default escape is a backslash).
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

func likePrefix(s string) string { return escapeLike(s) + "%" }

// StateCounts counts the mirrored tasks per state: every task in an
// active state (waiting, ready, running, retrying), and the tasks that
// entered a final state at or after terminalSince (zero: all of them).
// Each count is a range of the ax_tasks_state (state, state_since) index,
// so with terminalSince set the cost follows the backlog and the recent
// throughput, not the size of the mirror. A count stops at max (> 0): a
// state holding more tasks counts max.
func (a *Auditor) StateCounts(ctx context.Context, terminalSince time.Time, max int) (map[string]int, error) {
	out := map[string]int{}
	for _, st := range []string{"waiting", "ready", "running", "retrying", "succeeded", "failed", "cancelled", "expired"} {
		query, args := "SELECT 1 FROM ax_tasks WHERE state = ?", []any{st}
		if !isActive(st) && !terminalSince.IsZero() {
			query += " AND state_since >= ?"
			args = append(args, sqlTime(terminalSince))
		}
		query = "SELECT COUNT(*) FROM (" + query + " LIMIT ?) c"
		args = append(args, max)
		var n int
		if err := a.db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
			return nil, fmt.Errorf("count %s tasks: %w", st, err)
		}
		out[st] = n
	}
	return out, nil
}

// sqlTime is t in UTC cut to microseconds, DATETIME(6)'s precision: a
// literal with nanoseconds (as the driver interpolates it) keeps MariaDB
// from using the index range, turning a count of recent rows into a scan.
func sqlTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func isActive(state string) bool {
	for _, s := range ActiveStates {
		if s == state {
			return true
		}
	}
	return false
}

// ThroughputPoint counts the attempts of one task type that ended in one
// time bucket.
type ThroughputPoint struct {
	Type      string    `json:"type"`
	Bucket    time.Time `json:"bucket"`
	Succeeded int       `json:"succeeded"`
	Failed    int       `json:"failed"`
}

// Throughput counts ended attempts per type and bucket since the given time
// (along ax_attempts_finished: the cost follows the attempts in the range,
// not the size of the mirror).
func (a *Auditor) Throughput(ctx context.Context, since time.Time, bucket time.Duration) ([]ThroughputPoint, error) {
	secs := int64(bucket / time.Second)
	if secs <= 0 {
		secs = 60
	}
	rows, err := a.db.QueryContext(ctx, `SELECT type, CAST(FLOOR(UNIX_TIMESTAMP(finished_at) / ?) * ? AS SIGNED),
		SUM(outcome = 'succeeded'), SUM(outcome = 'failed')
		FROM ax_attempts WHERE finished_at >= ? GROUP BY 1, 2 ORDER BY 2`, secs, secs, sqlTime(since))
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	defer rows.Close()
	var out []ThroughputPoint
	for rows.Next() {
		var p ThroughputPoint
		var unix int64
		if err := rows.Scan(&p.Type, &unix, &p.Succeeded, &p.Failed); err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
		p.Bucket = time.Unix(unix, 0).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	return out, nil
}
