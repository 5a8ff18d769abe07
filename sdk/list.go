package sdk

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// List bounds.
const (
	// DefaultListLimit is ListFilter.Limit's default.
	DefaultListLimit = 100
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// ListFilter selects the tasks List returns. Empty fields do not filter.
type ListFilter struct {
	// State keeps the tasks in this state.
	State task.State
	// Type keeps the tasks of this type.
	Type string
	// Capability keeps the tasks routed to this capability.
	Capability string
	// Since keeps the tasks whose last change (UpdatedAt) is at or after
	// it; it also bounds what List reads (the events since then).
	Since time.Time
	// Limit bounds the page. Default DefaultListLimit, at most MaxListLimit.
	Limit int
	// Cursor continues a listing after a page: its ListPage.Next.
	Cursor string
}

// ListPage is one page of List: tasks newest change first.
type ListPage struct {
	// Tasks are the matching tasks' current records, the most recently
	// changed first.
	Tasks []task.Task `json:"tasks"`
	// Next is the cursor of the next page (ListFilter.Cursor); empty when
	// this page is the last.
	Next string `json:"next,omitempty"`
}

// List returns a page of the tasks matching f, the most recently changed
// first, from JetStream: the current record of each task (the last
// message of its history). It reads one message per task — with f.Since,
// the events since then — so it serves operators and tests, not hot
// paths; on a large deployment the MySQL mirror answers the same question
// from an index (`ax tasks ls --mysql-dsn`, the console). A task changed
// while a listing pages through moves to the front: it is not listed twice
// in one listing, but may be missed by it (as with any keyset paging by
// last change).
func (c *Client) List(ctx context.Context, f ListFilter) (*ListPage, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultListLimit
	}
	if f.Limit > MaxListLimit {
		return nil, fmt.Errorf("list tasks: %w limit %d: at most %d", ErrInvalid, f.Limit, MaxListLimit)
	}
	if f.State != "" && !f.State.Valid() {
		return nil, fmt.Errorf("list tasks: %w state %q", ErrInvalid, f.State)
	}
	if f.Type != "" && !task.ValidType(f.Type) {
		return nil, fmt.Errorf("list tasks: %w type %q", ErrInvalid, f.Type)
	}
	if f.Capability != "" && !task.ValidCapability(f.Capability) {
		return nil, fmt.Errorf("list tasks: %w capability %q", ErrInvalid, f.Capability)
	}
	before := uint64(0) // 0: from the newest
	if f.Cursor != "" {
		seq, err := strconv.ParseUint(strings.TrimPrefix(f.Cursor, listCursorPrefix), 10, 64)
		if err != nil || !strings.HasPrefix(f.Cursor, listCursorPrefix) || seq == 0 {
			return nil, fmt.Errorf("list tasks: %w cursor %q", ErrInvalid, f.Cursor)
		}
		before = seq
	}
	st, err := c.js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	page := &ListPage{Tasks: []task.Task{}}
	if info.State.Msgs == 0 || !f.Since.IsZero() && f.Since.After(info.State.LastTime) {
		return page, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.TaskAll}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy}
	if !f.Since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &f.Since
	}
	cons, done, err := scan.Open(ctx, c.js, subject.StreamTasks, cfg)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	defer done()
	// The newest Limit+1 matches below the cursor, by the sequence of
	// their task's last event. With Since every event since is read: a
	// task's later event replaces its earlier one before any is matched.
	top := &listHeap{}
	consider := func(it listItem) {
		if (before != 0 && it.seq >= before) || !listMatches(f, it.t) {
			return
		}
		heap.Push(top, it)
		if top.Len() > f.Limit+1 {
			heap.Pop(top)
		}
	}
	// Each task's last event: a task has a subject per kind of event (its
	// dispatches, its other events), and with Since every event since is
	// read.
	latest := map[string]listItem{}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	defer it.Stop()
	for {
		// Messages stream in as fast as the server sends them; a pause
		// of 2 s means the end (the events since f.Since were fewer than
		// the stream's last sequence says, say: removed meanwhile).
		msg, err := it.Next(jetstream.NextMaxWait(2 * time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		seq := md.Sequence.Stream
		var ev task.Event
		if json.Unmarshal(msg.Data(), &ev) == nil {
			id := subject.TaskID(msg.Subject())
			if cur, ok := latest[id]; !ok || seq > cur.seq {
				latest[id] = listItem{seq: seq, t: ev.Task}
			}
		}
		if md.NumPending == 0 || seq >= info.State.LastSeq {
			break
		}
	}
	for _, it := range latest {
		consider(it)
	}
	items := make([]listItem, 0, top.Len())
	for top.Len() > 0 {
		items = append(items, heap.Pop(top).(listItem))
	}
	for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
		items[i], items[j] = items[j], items[i]
	}
	if len(items) > f.Limit {
		items = items[:f.Limit]
		page.Next = listCursorPrefix + strconv.FormatUint(items[len(items)-1].seq, 10)
	}
	for _, it := range items {
		t := it.t
		if err := c.decodeTask(ctx, &t); err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		page.Tasks = append(page.Tasks, t)
	}
	return page, nil
}

// listCursorPrefix starts a JetStream listing's cursor ("js:<sequence>").
const listCursorPrefix = "js:"

// listMatches applies f's filters to a record.
func listMatches(f ListFilter, t task.Task) bool {
	return (f.State == "" || t.State == f.State) && (f.Type == "" || t.Type == f.Type) &&
		(f.Capability == "" || t.Capability == f.Capability) && (f.Since.IsZero() || !t.UpdatedAt.Before(f.Since))
}

// listItem is a candidate of a page: a record and its event's sequence.
type listItem struct {
	seq uint64
	t   task.Task
}

// listHeap is a min-heap by sequence: the oldest candidate goes first.
type listHeap []listItem

func (h listHeap) Len() int           { return len(h) }
func (h listHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h listHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *listHeap) Push(x any)        { *h = append(*h, x.(listItem)) }
func (h *listHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
