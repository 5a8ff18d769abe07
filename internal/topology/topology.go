// Package topology declares AX's JetStream streams and creates them
// idempotently: every process that needs them calls Ensure at start.
package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// Options tune the declared streams.
type Options struct {
	// Replicas is the stream replication factor. Default 1 (single node).
	Replicas int
	// DuplicateWindow is the submit stream's de-duplication window. Default 2m.
	DuplicateWindow time.Duration
	// TaskHistoryMaxAge bounds how long task histories are kept. Default 0: forever.
	TaskHistoryMaxAge time.Duration
}

// Streams returns the configuration of every stream AX uses.
func Streams(o Options) []jetstream.StreamConfig {
	r := o.Replicas
	if r <= 0 {
		r = 1
	}
	dup := o.DuplicateWindow
	if dup <= 0 {
		dup = 2 * time.Minute
	}
	return []jetstream.StreamConfig{
		{
			Name:        subject.StreamSubmit,
			Description: "AX task submissions, consumed by the orchestrator",
			Subjects:    []string{subject.SubmitAll, subject.GraphSubmit},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dup,
			MaxMsgSize:  2 << 20,
		},
		{
			Name:        subject.StreamReady,
			Description: "AX ready tasks per capability and priority, consumed by executors",
			Subjects:    []string{subject.ReadyAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dup,
		},
		{
			Name:        subject.StreamCompleted,
			Description: "AX attempt outcomes reported by executors",
			Subjects:    []string{subject.CompletedAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dup,
		},
		{
			Name:        subject.StreamTasks,
			Description: "AX task histories: one subject per task, last message is its state",
			Subjects:    []string{subject.TaskAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxAge:      o.TaskHistoryMaxAge,
			AllowDirect: true,
		},
		{
			Name:              subject.StreamTimers,
			Description:       "AX durable timers (message schedules) and their fired messages",
			Subjects:          []string{subject.TimerAll, subject.FireAll},
			Retention:         jetstream.WorkQueuePolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			AllowMsgSchedules: true,
			MaxMsgsPerSubject: 1,
			AllowDirect:       true,
		},
		{
			Name:        subject.StreamCommands,
			Description: "AX operator commands (cancel, redrive)",
			Subjects:    []string{subject.CommandAll},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dup,
		},
		{
			Name:              subject.StreamDLQ,
			Description:       "AX dead letters: one entry per failed task",
			Subjects:          []string{subject.DLQAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
			AllowDirect:       true,
		},
		{
			Name:              subject.StreamHeld,
			Description:       "AX tasks held back by a paused type or an open circuit breaker",
			Subjects:          []string{subject.HeldAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
		},
		{
			Name:        subject.StreamAudit,
			Description: "AX audit events that are not about one task (breakers, pauses)",
			Subjects:    []string{subject.AuditAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxAge:      90 * 24 * time.Hour,
		},
		{
			Name:        subject.StreamFanIn,
			Description: "AX fan-in markers: how each shard or wide-fan-in upstream ended, one per member",
			Subjects:    []string{subject.FanInAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxAge:      o.TaskHistoryMaxAge,
			AllowDirect: true,
		},
		{
			Name:              subject.StreamLeases,
			Description:       "AX leases of long-running tasks, renewed by their executors' heartbeats (per-message TTL)",
			Subjects:          []string{subject.LeaseAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
			AllowMsgTTL:       true,
			AllowDirect:       true,
		},
		{
			Name:              subject.StreamRejected,
			Description:       "AX rejected submissions with their reasons",
			Subjects:          []string{subject.RejectedAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
			MaxMsgs:           1_000_000,
			MaxAge:            30 * 24 * time.Hour,
			Discard:           jetstream.DiscardOld,
			AllowDirect:       true,
		},
	}
}

// Buckets returns the configuration of every key-value bucket AX uses.
func Buckets(o Options) []jetstream.KeyValueConfig {
	r := o.Replicas
	if r <= 0 {
		r = 1
	}
	return []jetstream.KeyValueConfig{
		{Bucket: subject.BucketSchedules, Description: "AX recurring schedules", History: 1, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: subject.BucketControl, Description: "AX pause switches and circuit breakers", History: 16, Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: subject.BucketRetryWindows, Description: "AX retry starts per task type and window", History: 1,
			TTL: time.Hour, Storage: jetstream.FileStorage, Replicas: r},
	}
}

// ObjectStores returns the configuration of every object store AX uses.
func ObjectStores(o Options) []jetstream.ObjectStoreConfig {
	r := o.Replicas
	if r <= 0 {
		r = 1
	}
	return []jetstream.ObjectStoreConfig{
		{Bucket: subject.BucketObjects, Description: "AX shard plans and large results", Storage: jetstream.FileStorage,
			Replicas: r, TTL: o.TaskHistoryMaxAge},
	}
}

// Ensure creates or updates every stream and bucket. It is safe to call
// concurrently from several processes.
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) error {
	for _, cfg := range Streams(o) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range Buckets(o) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
		}
	}
	for _, cfg := range ObjectStores(o) {
		if _, err := js.CreateOrUpdateObjectStore(ctx, cfg); err != nil {
			return fmt.Errorf("ensure object store %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// EnsureExists creates the streams that are missing and leaves existing ones
// as they are (for clients that should not reconfigure a running system).
func EnsureExists(ctx context.Context, js jetstream.JetStream, o Options) error {
	for _, cfg := range Streams(o) {
		_, err := js.CreateStream(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	for _, cfg := range Buckets(o) {
		_, err := js.CreateKeyValue(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("create bucket %s: %w", cfg.Bucket, err)
		}
	}
	for _, cfg := range ObjectStores(o) {
		_, err := js.CreateObjectStore(ctx, cfg)
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("create object store %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}
