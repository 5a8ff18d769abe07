package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Execer is what Enqueue writes with: a *sql.Tx (the point of an outbox), or
// a *sql.Conn inside a transaction. Given a *sql.DB the rows are written in
// their own autocommit statement, with no tie to other writes.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Table is the outbox table's name.
const Table = "ax_outbox"

// insertChunk bounds the rows of one multi-row INSERT.
const insertChunk = 500

// row is one submission to publish.
type row struct {
	taskID  string
	subject string
	body    []byte
	tasks   int
}

// prepare fills a spec's id (a ULID when empty) and defaults, and validates it.
func prepare(s *task.Spec) error {
	if s.ID == "" {
		s.ID = task.NewID()
	}
	s.Normalize()
	if err := s.Validate(0); err != nil {
		return fmt.Errorf("invalid task %s: %w", s.ID, err)
	}
	return nil
}

func specRow(s task.Spec) (row, error) {
	if err := prepare(&s); err != nil {
		return row{}, err
	}
	body, err := json.Marshal(s)
	if err != nil {
		return row{}, fmt.Errorf("encode task %s: %w", s.ID, err)
	}
	return row{taskID: s.ID, subject: subject.SubmitLane(s.PriorityLevel(), s.Type), body: body, tasks: 1}, nil
}

// Enqueue validates spec, fills its defaults and its id (a sortable unique
// id when empty) and writes it into the outbox with tx. It returns the task
// id. The task is submitted when the relay publishes the row, which exists
// only if tx commits: a rolled-back transaction submits nothing. Fields
// left unset take their defaults (see task.Spec).
func Enqueue(ctx context.Context, tx Execer, spec task.Spec) (string, error) {
	r, err := specRow(spec)
	if err != nil {
		return "", err
	}
	if err := insert(ctx, tx, []row{r}); err != nil {
		return "", err
	}
	return r.taskID, nil
}

// EnqueueMany is Enqueue for several specs, written with multi-row INSERTs
// (500 rows per statement). Each spec becomes its own task; validation
// errors write nothing.
func EnqueueMany(ctx context.Context, tx Execer, specs []task.Spec) ([]string, error) {
	if len(specs) == 0 {
		return nil, ErrEmpty
	}
	rows := make([]row, len(specs))
	ids := make([]string, len(specs))
	for i, s := range specs {
		r, err := specRow(s)
		if err != nil {
			return nil, err
		}
		rows[i], ids[i] = r, r.taskID
	}
	if err := insert(ctx, tx, rows); err != nil {
		return nil, err
	}
	return ids, nil
}

// EnqueueGraph writes a graph (tasks with depends_on edges among them or on
// existing tasks) as one outbox row, published on task.graph.submit: the
// orchestrator creates all of it or rejects all of it. It returns the ids
// in order.
func EnqueueGraph(ctx context.Context, tx Execer, specs []task.Spec) ([]string, error) {
	if len(specs) == 0 {
		return nil, ErrEmpty
	}
	specs = append([]task.Spec(nil), specs...)
	ids := make([]string, len(specs))
	for i := range specs {
		if err := prepare(&specs[i]); err != nil {
			return nil, err
		}
		ids[i] = specs[i].ID
	}
	g := task.Graph{Tasks: specs}
	if _, err := g.Sorted(0); err != nil {
		return nil, fmt.Errorf("invalid graph: %w", err)
	}
	body, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("encode graph: %w", err)
	}
	r := row{taskID: ids[0], subject: subject.GraphSubmit, body: body, tasks: len(specs)}
	if err := insert(ctx, tx, []row{r}); err != nil {
		return nil, err
	}
	return ids, nil
}

func insert(ctx context.Context, tx Execer, rows []row) error {
	for start := 0; start < len(rows); start += insertChunk {
		chunk := rows[start:min(len(rows), start+insertChunk)]
		var q strings.Builder
		q.WriteString("INSERT INTO " + Table + " (task_id, subject, body, tasks, created_at) VALUES ")
		args := make([]any, 0, 4*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?, ?, ?, UTC_TIMESTAMP(6))")
			args = append(args, r.taskID, r.subject, r.body, r.tasks)
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("enqueue task %s into %s: %w", chunk[0].taskID, Table, err)
		}
	}
	return nil
}

// Notify wakes every relay listening on nc's server (a core NATS message on
// ax.outbox.notify), so rows committed just now are published at once
// rather than at the relays' next poll (at most Config.Interval later).
// Call it after the transaction committed; it is an optimisation only.
func Notify(nc *nats.Conn) error {
	if err := nc.Publish(subject.OutboxNotify, nil); err != nil {
		return fmt.Errorf("notify outbox relays: %w", err)
	}
	return nil
}
