package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// CreateSchedule creates (or replaces) a recurring schedule: every firing of
// s.Cron creates one task from s.Template with the id "<name>-<fire time>".
// It returns the schedule as stored, with its next firing.
func (c *Client) CreateSchedule(ctx context.Context, s task.Schedule) (*task.Schedule, error) {
	if err := s.ValidateDefinition(c.MaxPayload); err != nil {
		return nil, fmt.Errorf("invalid schedule: %w", err)
	}
	if c.Codec != nil {
		s.Graph = slices.Clone(s.Graph)
		for _, spec := range append([]*task.Spec{&s.Template}, specPointers(s.Graph)...) {
			if len(spec.Payload) == 0 {
				continue
			}
			enc, err := codec.EncodePayload(ctx, c.Codec, spec.Payload)
			if err != nil {
				return nil, fmt.Errorf("schedule %s: template: %w", s.Name, err)
			}
			spec.Payload = enc
		}
		if err := s.ValidateDefinition(c.MaxPayload); err != nil {
			return nil, fmt.Errorf("invalid schedule once its template's payload is encoded: %w", err)
		}
	}
	body, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode schedule: %w", err)
	}
	return c.scheduleCommand(ctx, subject.CommandScheduleCreate, s.Name, body)
}

// PauseSchedule stops a schedule from firing until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*task.Schedule, error) {
	return c.scheduleCommand(ctx, subject.CommandSchedulePause, name, nil)
}

// ResumeSchedule lets a paused schedule fire again, from now on.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*task.Schedule, error) {
	return c.scheduleCommand(ctx, subject.CommandScheduleResume, name, nil)
}

// DeleteSchedule removes a schedule; tasks it created are not touched.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := c.scheduleCommand(ctx, subject.CommandScheduleDelete, name, nil)
	return err
}

func (c *Client) scheduleCommand(ctx context.Context, kind, name string, body []byte) (*task.Schedule, error) {
	rep, err := c.send(ctx, kind, name, body)
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		return rep.Schedule, refused(kind, name, rep)
	}
	return rep.Schedule, nil
}

// Schedule returns one schedule.
func (c *Client) Schedule(ctx context.Context, name string) (*task.Schedule, error) {
	kv, err := c.js.KeyValue(ctx, subject.BucketSchedules)
	if err != nil {
		return nil, fmt.Errorf("bind schedules: %w", err)
	}
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("schedule %s: %w", name, ErrScheduleNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule %s: %w", name, err)
	}
	var s task.Schedule
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, fmt.Errorf("decode schedule %s: %w", name, err)
	}
	if err := c.decodeSchedule(ctx, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Schedules lists every schedule by name.
func (c *Client) Schedules(ctx context.Context) ([]task.Schedule, error) {
	kv, err := c.js.KeyValue(ctx, subject.BucketSchedules)
	if err != nil {
		return nil, fmt.Errorf("bind schedules: %w", err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []task.Schedule
	for name := range lister.Keys() {
		s, err := c.Schedule(ctx, name)
		if err != nil {
			continue // deleted meanwhile
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// decodeSchedule decodes the payloads of a schedule's template or graph.
func (c *Client) decodeSchedule(ctx context.Context, s *task.Schedule) error {
	if err := c.decodeSpec(ctx, &s.Template); err != nil {
		return fmt.Errorf("schedule %s: template: %w", s.Name, err)
	}
	for i := range s.Graph {
		if err := c.decodeSpec(ctx, &s.Graph[i]); err != nil {
			return fmt.Errorf("schedule %s: graph task %s: %w", s.Name, s.Graph[i].ID, err)
		}
	}
	return nil
}

func specPointers(specs []task.Spec) []*task.Spec {
	out := make([]*task.Spec, len(specs))
	for i := range specs {
		out[i] = &specs[i]
	}
	return out
}
