package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/scan"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Pause holds dispatch of a task type ("" for every type) until Resume:
// its new tasks wait and its retries wait, visibly ("held: …"). With
// retriesOnly, new tasks still run and only retries are held. Durable
// across restarts.
func (c *Client) Pause(ctx context.Context, taskType string, retriesOnly bool, reason string) error {
	body, _ := json.Marshal(task.CommandRequest{Reason: reason, RetriesOnly: retriesOnly})
	return c.control(ctx, subject.CommandPause, taskType, body)
}

// Resume lifts a pause and releases the tasks it held.
func (c *Client) Resume(ctx context.Context, taskType, reason string) error {
	body, _ := json.Marshal(task.CommandRequest{Reason: reason})
	return c.control(ctx, subject.CommandResume, taskType, body)
}

func (c *Client) control(ctx context.Context, kind, taskType string, body []byte) error {
	if taskType != "" && !task.ValidType(taskType) {
		return fmt.Errorf("%s: %w task type %q", kind, ErrInvalid, taskType)
	}
	rep, err := c.send(ctx, kind, subject.PauseScope(taskType), body)
	if err != nil {
		return err
	}
	if !rep.OK {
		return refused(kind, subject.PauseScope(taskType), rep)
	}
	return nil
}

// BreakerStatus is a task type's circuit breaker as shared by the orchestrators.
type BreakerStatus struct {
	// State is closed, open or half_open.
	State string `json:"state"`
	// Since is when it entered State.
	Since time.Time `json:"since"`
	// ProbesLeft is how many probe attempts a half-open breaker still lets through.
	ProbesLeft int `json:"probes_left"`
	// FailureRatio is the share of failed attempts in the sliding window.
	FailureRatio float64 `json:"failure_ratio"`
	// Volume is the number of attempts in the sliding window.
	Volume int `json:"volume"`
}

// GateStatus lists the pause switches ("" is every type) and the breakers.
type GateStatus struct {
	// Pauses are the pause switches by task type ("" is every type).
	Pauses map[string]task.Pause `json:"pauses"`
	// Breakers are the circuit breakers by task type.
	Breakers map[string]BreakerStatus `json:"breakers"`
}

// Gates returns every pause switch and circuit breaker.
func (c *Client) Gates(ctx context.Context) (*GateStatus, error) {
	kv, err := c.js.KeyValue(ctx, subject.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.BucketControl, err)
	}
	out := &GateStatus{Pauses: map[string]task.Pause{}, Breakers: map[string]BreakerStatus{}}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list gates: %w", err)
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("get %s: %w", key, err)
		}
		kind, taskType, ok := subject.ParseControlKey(key)
		switch {
		case !ok:
		case kind == "pause":
			var p task.Pause
			if json.Unmarshal(e.Value(), &p) == nil {
				out.Pauses[taskType] = p
			}
		case kind == "breaker":
			var b BreakerStatus
			if json.Unmarshal(e.Value(), &b) == nil {
				out.Breakers[taskType] = b
			}
		}
	}
	return out, nil
}

// AuditEvents returns the non-task audit events (breaker and pause
// changes), oldest first, up to limit of the newest.
func (c *Client) AuditEvents(ctx context.Context, limit int) ([]task.AuditEvent, error) {
	st, err := c.js.Stream(ctx, subject.StreamAudit)
	if err != nil {
		return nil, fmt.Errorf("bind audit: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if info.State.Msgs == 0 || limit <= 0 {
		return nil, nil
	}
	start := info.State.FirstSeq
	if info.State.LastSeq >= uint64(limit) && info.State.LastSeq-uint64(limit)+1 > start {
		start = info.State.LastSeq - uint64(limit) + 1
	}
	cons, done, err := scan.Open(ctx, c.js, subject.StreamAudit, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer done()
	var out []task.AuditEvent
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			return out, fmt.Errorf("audit: %w", err)
		}
		var ev task.AuditEvent
		if json.Unmarshal(msg.Data(), &ev) == nil {
			out = append(out, ev)
		}
		md, err := msg.Metadata()
		if err != nil || md.NumPending == 0 {
			return out, nil
		}
	}
}
