package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Workers lists the executors in the workers registry (AX_WORKERS), by
// id: every executor that runs now, idle ones included, with its
// capabilities, handled types, capacity and load, the handlers running on
// it and since when (with their progress), its version and last
// heartbeat. An executor announces itself when it starts and whenever a
// handler starts or ends (within a quarter second); one that stops
// cleanly leaves the list at once, one whose process died when its
// announcement's TTL ends (three announce intervals: 15 s by default).
func (c *Client) Workers(ctx context.Context) ([]task.Worker, error) {
	stream := "KV_" + subject.BucketWorkers
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("bind workers registry: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("workers registry: %w", err)
	}
	if info.State.Msgs == 0 {
		return []task.Worker{}, nil
	}
	cons, done, err := scan.Open(ctx, c.js, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		return nil, fmt.Errorf("workers registry: %w", err)
	}
	defer done()
	out := []task.Worker{}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			break // the last entry expired meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("workers registry: %w", err)
		}
		if w, ok := decodeWorker(msg); ok {
			out = append(out, w)
		}
		md, err := msg.Metadata()
		if err != nil || md.NumPending == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b task.Worker) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// decodeWorker reads a registry message: false for a removal (a purge, a
// delete, or the marker of an expired announcement) or an unreadable one.
func decodeWorker(msg jetstream.Msg) (task.Worker, bool) {
	var w task.Worker
	if h := msg.Headers(); h != nil && (h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "") {
		return w, false
	}
	if _, _, ok := subject.ParseWorkerKey(strings.TrimPrefix(msg.Subject(), subject.KVKey(subject.BucketWorkers, ""))); !ok {
		return w, false
	}
	if err := json.Unmarshal(msg.Data(), &w); err != nil || w.ID == "" {
		return w, false
	}
	return w, true
}

// RunningOn finds where a task's handler runs now, from the workers
// registry: the executor and the execution listed for task id (the
// newest, should two executors list it), or nil, nil when none does. A
// task's record says running only once its attempt outlived a heartbeat
// (or was taken over); the registry shows it within a quarter second of
// its handler starting.
func (c *Client) RunningOn(ctx context.Context, id string) (*task.Worker, *task.WorkerExecution, error) {
	ws, err := c.Workers(ctx)
	if err != nil {
		return nil, nil, err
	}
	var bw *task.Worker
	var bx *task.WorkerExecution
	for i := range ws {
		for j := range ws[i].Running {
			if x := &ws[i].Running[j]; x.TaskID == id && (bx == nil || x.Since.After(bx.Since)) {
				bw, bx = &ws[i], x
			}
		}
	}
	return bw, bx, nil
}
