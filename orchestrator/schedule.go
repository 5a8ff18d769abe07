package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/cronspec"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Recurring schedules live in the AX_SCHEDULES bucket; each is driven by a
// chain of one-shot durable timers (ax.timer.schedule.<name>): a firing
// creates the task for its slot (id "<name>-<slot>", so a firing seen twice
// creates one task), records the slot with a compare-and-set on the
// schedule, and arms the next slot. After downtime the pending timer fires
// once and the next slot is computed from now — unless CatchUp is set, in
// which case every missed slot fires in turn.

func (o *Orchestrator) schedules(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := o.js.KeyValue(ctx, subject.BucketSchedules)
	if err != nil {
		return nil, fmt.Errorf("bind schedules: %w", err)
	}
	return kv, nil
}

// loadSchedule returns a schedule and its revision (nil if absent).
func loadSchedule(ctx context.Context, kv jetstream.KeyValue, name string) (*task.Schedule, uint64, error) {
	e, err := kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get schedule %s: %w", name, err)
	}
	var s task.Schedule
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, 0, fmt.Errorf("decode schedule %s: %w", name, err)
	}
	return &s, e.Revision(), nil
}

// saveSchedule writes s if the bucket is still at rev (0: must not exist).
func saveSchedule(ctx context.Context, kv jetstream.KeyValue, s *task.Schedule, rev uint64) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode schedule %s: %w", s.Name, err)
	}
	if rev == 0 {
		_, err = kv.Create(ctx, s.Name, data)
	} else {
		_, err = kv.Update(ctx, s.Name, data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("save schedule %s: %w", s.Name, err)
	}
	return nil
}

var errConflict = errors.New("schedule changed concurrently")

// updateSchedule applies change to the current schedule with
// compare-and-set, retrying on conflicts. change returns false to leave it.
func (o *Orchestrator) updateSchedule(ctx context.Context, name string, change func(s *task.Schedule) (bool, error)) (*task.Schedule, error) {
	kv, err := o.schedules(ctx)
	if err != nil {
		return nil, err
	}
	for range maxCASRetries {
		s, rev, err := loadSchedule(ctx, kv, name)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, fmt.Errorf("%w: schedule %s %w", errCommand, name, errNotFound)
		}
		ok, err := change(s)
		if err != nil || !ok {
			return s, err
		}
		s.UpdatedAt = o.now()
		if err := saveSchedule(ctx, kv, s, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("schedule %s: %w", name, consume.ErrContended)
}

// createSchedule creates or replaces a schedule and arms its first firing.
func (o *Orchestrator) createSchedule(ctx context.Context, name string, body []byte) (*task.Schedule, error) {
	var def task.Schedule
	if err := json.Unmarshal(body, &def); err != nil {
		return nil, fmt.Errorf("%w: decode schedule: %v", errInvalid, err)
	}
	def.Name = name
	if err := def.ValidateDefinition(o.cfg.MaxPayload); err != nil {
		return nil, fmt.Errorf("%w: schedule %s: %v", errInvalid, name, err)
	}
	cron, err := cronspec.Parse(def.Cron, def.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %s: %v", errInvalid, name, err)
	}
	if len(def.Graph) > 0 {
		if err := o.checkScheduleGraph(ctx, &def); err != nil { // schedule_graph.go
			return nil, err
		}
	} else if err := o.admitTypes(ctx, def.Template.Type); err != nil {
		var rej errRejected
		if errors.As(err, &rej) {
			return nil, fmt.Errorf("%w: schedule %s: template: %v", errCommand, name, rej.reason)
		}
		return nil, err
	}
	if def.Overlap == "" {
		def.Overlap = task.OverlapSkip
	}
	def.Template.ID = ""
	if len(def.Graph) == 0 {
		def.Template.Normalize()
	}
	kv, err := o.schedules(ctx)
	if err != nil {
		return nil, err
	}
	for range maxCASRetries {
		old, rev, err := loadSchedule(ctx, kv, name)
		if err != nil {
			return nil, err
		}
		now := o.now()
		s := def
		s.CreatedAt, s.UpdatedAt = now, now
		if old != nil {
			s.CreatedAt, s.LastFire, s.LastTaskID, s.Skipped = old.CreatedAt, old.LastFire, old.LastTaskID, old.Skipped
		}
		s.ArmID = nuid.Next()
		s.NextFire = nil
		if !s.Paused {
			next := cron.Next(now)
			s.NextFire = &next
		}
		if err := saveSchedule(ctx, kv, &s, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		return &s, o.armSchedule(ctx, &s)
	}
	return nil, fmt.Errorf("schedule %s: %w", name, consume.ErrContended)
}

// armSchedule makes sure the schedule's next firing has its timer (a paused
// schedule has none).
func (o *Orchestrator) armSchedule(ctx context.Context, s *task.Schedule) error {
	if s.Paused || s.NextFire == nil {
		return o.cancelTimer(ctx, subject.TimerSchedule, s.Name)
	}
	return o.armTimer(ctx, subject.TimerSchedule, timerFire{ID: s.Name, ExecutionID: s.ArmID, At: *s.NextFire})
}

// pauseSchedule stops firing; resumeSchedule starts again from now.
func (o *Orchestrator) pauseSchedule(ctx context.Context, name string, pause bool) (*task.Schedule, error) {
	s, err := o.updateSchedule(ctx, name, func(s *task.Schedule) (bool, error) {
		if s.Paused == pause {
			return false, nil
		}
		s.Paused = pause
		s.ArmID = nuid.Next()
		s.NextFire = nil
		if !pause {
			cron, err := cronspec.Parse(s.Cron, s.TimeZone)
			if err != nil {
				return false, fmt.Errorf("%w: %v", errCommand, err)
			}
			next := cron.Next(o.now())
			s.NextFire = &next
		}
		return true, nil
	})
	if err != nil {
		return s, err
	}
	return s, o.armSchedule(ctx, s)
}

// deleteSchedule removes a schedule and its pending timer.
func (o *Orchestrator) deleteSchedule(ctx context.Context, name string) error {
	kv, err := o.schedules(ctx)
	if err != nil {
		return err
	}
	if s, _, err := loadSchedule(ctx, kv, name); err != nil {
		return err
	} else if s == nil {
		// Gone already (deleted before, or never made): its timer too,
		// unless a crash left it; cancel it anyway.
		if err := o.cancelTimer(ctx, subject.TimerSchedule, name); err != nil {
			return err
		}
		return fmt.Errorf("%w: schedule %s %w", errCommand, name, errNotFound)
	}
	if err := kv.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return o.cancelTimer(ctx, subject.TimerSchedule, name)
}

// fireSchedule handles one firing: create the slot's task (unless the
// overlap policy skips it), record the slot, arm the next one.
func (o *Orchestrator) fireSchedule(ctx context.Context, f timerFire) error {
	kv, err := o.schedules(ctx)
	if err != nil {
		return err
	}
	for range maxCASRetries {
		s, rev, err := loadSchedule(ctx, kv, f.ID)
		if err != nil {
			return err
		}
		if s == nil || s.Paused || s.ArmID != f.ExecutionID {
			return nil // deleted, paused or re-armed: a stale timer
		}
		slot := f.At.UTC()
		if s.LastFire != nil && !slot.After(*s.LastFire) {
			// A replay: the slot is done; its successor is armed (or due).
			if s.NextFire != nil && s.NextFire.After(*s.LastFire) {
				return o.armSchedule(ctx, s)
			}
			return nil
		}
		cron, err := cronspec.Parse(s.Cron, s.TimeZone)
		if err != nil {
			return fmt.Errorf("schedule %s: %w", s.Name, err)
		}
		skip, err := o.overlapping(ctx, s)
		if err != nil {
			return err
		}
		id := cronspec.FireID(s.Name, slot)
		switch {
		case skip:
			s.Skipped++
			o.log.Info("firing skipped: previous task still running", slog.String("schedule", s.Name), slog.Time("slot", slot), slog.String("running", s.LastTaskID))
		case len(s.Graph) > 0:
			last, err := o.fireGraph(ctx, s, id) // schedule_graph.go
			if err != nil {
				return err
			}
			s.LastTaskID = last
		default:
			spec := s.Template
			spec.ID = id
			err := o.admitTypes(ctx, spec.Type)
			if err == nil {
				err = o.create(ctx, spec, nil)
			}
			if err != nil {
				var rej errRejected
				if !errors.As(err, &rej) {
					return err
				}
				o.log.Warn("scheduled task rejected", slog.Any("error", err), slog.String("schedule", s.Name))
			}
			s.LastTaskID = id
		}
		s.LastFire = &slot
		// The next slot is strictly after this one, even when the timer fired
		// a moment before the slot (else the same slot would re-arm forever).
		now := o.now()
		next := cron.Next(laterOf(now, slot))
		if s.CatchUp {
			// Missed slots are due already: they fire at once, one by one.
			missed, truncated := cron.Missed(slot, now, task.MaxCatchUp)
			switch {
			case truncated:
				o.log.Warn("too many missed slots to catch up; continuing from now", slog.String("schedule", s.Name), slog.Int("limit", task.MaxCatchUp))
			case len(missed) > 0:
				next = missed[0]
			}
		}
		s.NextFire = &next
		s.UpdatedAt = o.now()
		if err := saveSchedule(ctx, kv, s, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return err
		}
		return o.armSchedule(ctx, s)
	}
	return fmt.Errorf("fire schedule %s: %w", f.ID, consume.ErrContended)
}

// overlapping reports whether a skip-overlap schedule's last task is still
// unfinished.
func (o *Orchestrator) overlapping(ctx context.Context, s *task.Schedule) (bool, error) {
	if s.Overlap != task.OverlapSkip || s.LastTaskID == "" {
		return false, nil
	}
	t, _, err := o.store.Get(ctx, s.LastTaskID)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return !t.State.Terminal(), nil
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
