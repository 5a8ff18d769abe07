package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// PruneResult counts what one retention pass deleted.
type PruneResult struct {
	Events   int64 `json:"events"`
	Attempts int64 `json:"attempts"`
	Tasks    int64 `json:"tasks"`
	Steps    int64 `json:"steps"`
	// EventWaits counts the rows of ended event tasks deleted.
	EventWaits int64 `json:"event_waits"`
	// Statements is the number of DELETE statements run (each bounded).
	Statements int `json:"statements"`
}

// pruneStatements delete, in bounded batches along an index, the rows
// retention removes: events older than the cut-off, attempts that finished
// before it and tasks that ended (terminal state) before it.
var pruneStatements = []struct {
	table string
	query string
}{
	{"ax_events", "DELETE FROM ax_events WHERE at < ? ORDER BY at LIMIT ?"},
	{"ax_attempts", "DELETE FROM ax_attempts WHERE finished_at < ? ORDER BY finished_at LIMIT ?"},
	{"ax_tasks", "DELETE FROM ax_tasks WHERE updated_at < ? AND state IN ('succeeded','failed','cancelled','expired') ORDER BY updated_at LIMIT ?"},
	{"ax_steps", "DELETE FROM ax_steps WHERE stored_at < ? ORDER BY stored_at LIMIT ?"},
	{"ax_event_waits", "DELETE FROM ax_event_waits WHERE updated_at < ? AND outcome NOT IN ('pending','waiting') ORDER BY updated_at LIMIT ?"},
}

// Prune deletes the rows older than before, at most batch rows per
// statement, each statement its own short transaction, so retention never
// holds locks for long. It stops early when ctx ends.
func Prune(ctx context.Context, db *sql.DB, before time.Time, batch int) (PruneResult, error) {
	if batch <= 0 {
		batch = DefaultRetentionBatch
	}
	before = before.UTC()
	var res PruneResult
	for _, p := range pruneStatements {
		for {
			r, err := db.ExecContext(ctx, p.query, before, batch)
			if err != nil {
				return res, fmt.Errorf("prune %s: %w", p.table, err)
			}
			res.Statements++
			n, err := r.RowsAffected()
			if err != nil {
				return res, fmt.Errorf("prune %s: %w", p.table, err)
			}
			switch p.table {
			case "ax_events":
				res.Events += n
			case "ax_attempts":
				res.Attempts += n
			case "ax_tasks":
				res.Tasks += n
			case "ax_steps":
				res.Steps += n
			case "ax_event_waits":
				res.EventWaits += n
			}
			if n < int64(batch) {
				break
			}
		}
	}
	return res, nil
}

// retain runs Prune now and every RetentionInterval until ctx ends.
func (m *Mirror) retain(ctx context.Context) {
	if m.cfg.RetentionAge < 0 {
		return
	}
	t := time.NewTicker(m.cfg.RetentionInterval)
	defer t.Stop()
	for {
		cutoff := m.cfg.Now().Add(-m.cfg.RetentionAge)
		res, err := Prune(ctx, m.db, cutoff, m.cfg.RetentionBatch)
		switch {
		case err != nil && ctx.Err() == nil:
			m.log.Warn().Err(err).Msg("retention failed; will try again")
		case res.Events+res.Attempts+res.Tasks > 0:
			m.log.Info().Time("before", cutoff).Int64("events", res.Events).Int64("attempts", res.Attempts).
				Int64("tasks", res.Tasks).Msg("retention deleted old rows")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
