// Package topology declares AX's JetStream streams, buckets and object
// stores. The orchestrator is their one owner: it creates and updates them
// with Ensure. Executors, clients and the mirror only bind (Check, Await).
//
// Every stream is created without direct gets: on a cluster a direct get is
// answered by any replica, including one that has not applied the latest
// write, and AX decides what (not) to do from its reads. Without
// AllowDirect, nats.go reads through the stream leader. The one exception
// is AX_TASKS while it has a single replica (see Ensure): the one server
// that answers is the leader, and its direct gets are much cheaper.
package topology

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
)

// Options tune the declared streams.
type Options struct {
	// Replicas is the stream replication factor. 0 keeps what the streams
	// have (1 when creating them). A count below the existing one is refused
	// unless AllowFewerReplicas is set: replication is the cluster's
	// configuration, and a process started with defaults must not lower it.
	Replicas int
	// AllowFewerReplicas lets Ensure lower the replica count (the explicit
	// `ax topology --replicas N`).
	AllowFewerReplicas bool
	// DuplicateWindow is the submit stream's de-duplication window. Default 2m.
	DuplicateWindow time.Duration
	// DLQMaxAge is how long AX_DLQ keeps a dead letter (the stream's max
	// age; a per-message TTL can make one type's shorter). 0 keeps what
	// the stream has (for ever when creating it); negative: for ever.
	DLQMaxAge time.Duration
	// TaskHistoryMaxAge bounds how long the history of a finished task is
	// kept after it finished (the orchestrator removes it then, with its
	// fan-in markers); unfinished tasks are never removed. It is also the
	// TTL of the object stores (AX_OBJECTS and each capability's
	// AX_OBJECTS_<capability>: plans and large results). Default 0: forever.
	TaskHistoryMaxAge time.Duration
	// ReadyInMemory keeps AX_READY, the dispatches, in memory instead of
	// on disk. A dispatch is derived state: the task record says the task
	// is ready, and the reconciler dispatches again a ready task whose
	// dispatch is gone (a server restart empties a memory stream; on a
	// cluster only a restart of every replica does). It takes one stored
	// message per task off the disk: with fsync on every write, one fsync.
	// It applies when AX_READY is created: JetStream cannot change the
	// storage of a stream (see Ensure).
	ReadyInMemory bool
	// ReadyMaxBytes bounds AX_READY's memory with ReadyInMemory. Default
	// DefaultReadyMaxBytes.
	ReadyMaxBytes int64
	// ReadyMaxPerLevel bounds the dispatches stored for one capability and
	// priority with ReadyInMemory, so a capability nobody serves cannot
	// take every other one's room. Default DefaultReadyMaxPerLevel.
	ReadyMaxPerLevel int64
	// GroupCommit, when set, turns group commit on or off for the whole
	// deployment, recorded in AX_TASKS' metadata (groupcommit.MetadataKey):
	// orchestrators batch the record writes that queue up, and the SDK
	// stores large SubmitMany calls as atomic batches, each stored with one
	// fsync by a single-node server that syncs every write (a batch costs
	// more than its writes on a server that does not). nil keeps what
	// AX_TASKS says (off when it is created). Processes read it at start.
	GroupCommit *bool
}

// Bounds of an in-memory AX_READY (Options.ReadyInMemory). A dispatch
// beyond them is refused by the server and its task held until there is
// room (the orchestrator's parkFull).
const (
	DefaultReadyMaxBytes    = 256 << 20
	DefaultReadyMaxPerLevel = 10_000
)

// duplicateWindow is the de-duplication window of the queue streams.
func duplicateWindow(o Options) time.Duration {
	if o.DuplicateWindow <= 0 {
		return 2 * time.Minute
	}
	return o.DuplicateWindow
}

// readyConfig is AX_READY's configuration: on disk, or in memory with a
// bound per level and in bytes (a dispatch beyond either is refused, not
// an older one dropped).
func readyConfig(o Options, r int, dup time.Duration) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:        subject.StreamReady,
		Description: "AX ready tasks per capability and priority, consumed by executors",
		Subjects:    []string{subject.ReadyAll},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    r,
		Duplicates:  dup,
	}
	if o.ReadyInMemory {
		cfg.Storage = jetstream.MemoryStorage
		cfg.MaxBytes = cmp.Or(o.ReadyMaxBytes, DefaultReadyMaxBytes)
		cfg.MaxMsgsPerSubject = cmp.Or(o.ReadyMaxPerLevel, DefaultReadyMaxPerLevel)
		cfg.Discard = jetstream.DiscardNew
		cfg.DiscardNewPerSubject = true
	}
	return cfg
}

// Streams returns the configuration of every stream AX uses.
func Streams(o Options) []jetstream.StreamConfig {
	r := o.Replicas
	if r <= 0 {
		r = 1
	}
	dup := duplicateWindow(o)
	return []jetstream.StreamConfig{
		{
			Name:        subject.StreamSubmit,
			Description: "AX task submissions, consumed by the orchestrator",
			Subjects:    subject.SubmitSubjects(),
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dup,
			MaxMsgSize:  2 << 20,
			// The SDK stores a large SubmitMany as atomic batches.
			AllowAtomicPublish: true,
		},
		readyConfig(o, r, dup),
		{
			Name:        subject.StreamCompleted,
			Description: "AX attempt outcomes reported by executors",
			Subjects:    []string{subject.CompletedAll},
			Retention:   jetstream.LimitsPolicy,
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
			// An orchestrator with --group-commit writes the records that
			// queue up as one atomic batch (internal/groupcommit).
			AllowAtomicPublish: true,
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
			// A timer is cancelled by a plain message on its subject that
			// expires a second later (a publish, cheaper than a purge).
			AllowMsgTTL: true,
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
			MaxAge:            max(o.DLQMaxAge, 0),
			// A task type's dead letters may be kept shorter (a TTL each).
			AllowMsgTTL: true,
		},
		{
			Name:              subject.StreamHeld,
			Description:       "AX tasks held back by a paused type, an open circuit breaker or a concurrency limit",
			Subjects:          []string{subject.HeldAll, subject.SlotWaitAll},
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
		},
		{
			Name:        subject.StreamEdges,
			Description: "AX dependency edges: ax.edge.<upstream>.<dependent>, one per depends_on entry, written once",
			Subjects:    []string{subject.EdgeAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
		},
		{
			Name:        subject.StreamCounts,
			Description: "AX fan-in counters: how many members of each shard parent or wide fan-in ended",
			Subjects:    []string{subject.CountAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			// A counter subject keeps only its current value.
			MaxMsgsPerSubject: 1,
			AllowMsgCounter:   true,
			// Increments are de-duplicated by member (Nats-Msg-Id) within
			// this window, so a replayed end is not counted twice.
			Duplicates: dup,
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
		},
		{
			Name:              subject.StreamUnique,
			Description:       "AX unique keys: the task holding each unique_key of a type, until its unique_window ends (per-message TTL)",
			Subjects:          []string{subject.UniqueAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
			AllowMsgTTL:       true,
		},
		{
			Name:        subject.StreamTypes,
			Description: "AX task types accepted under a limit on distinct types: one message per type, in the order they were first accepted",
			Subjects:    []string{subject.TaskTypeAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxMsgSize:  1 << 10,
		},
		{
			Name:        subject.StreamPoison,
			Description: "AX messages an orchestrator could not apply after their delivery limit, kept for re-drive (ax poison)",
			Subjects:    []string{subject.PoisonAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxAge:      30 * 24 * time.Hour,
			MaxMsgs:     1_000_000,
			Discard:     jetstream.DiscardOld,
			Duplicates:  dup,
			MaxMsgSize:  4 << 20,
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
		{Bucket: subject.BucketSlots, Description: "AX concurrency slots taken per concurrency key", History: 1,
			Storage: jetstream.FileStorage, Replicas: r},
		{Bucket: subject.BucketKeys, Description: "AX orchestrators' secrets (the execution-token key); orchestrators only", History: 1,
			Storage: jetstream.FileStorage, Replicas: r},
		workersBucket(r),
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

// CapabilityObjectStore returns the configuration of a capability's object
// store (subject.ObjectBucket): AX_OBJECTS's, under the capability's name.
// The orchestrator creates it before the capability's first dispatch
// (EnsureCapabilityObjects); Check does not ask for it.
func CapabilityObjectStore(o Options, capability string) jetstream.ObjectStoreConfig {
	cfg := ObjectStores(o)[0]
	cfg.Bucket = subject.ObjectBucket(capability)
	cfg.Description = "AX shard plans and large results of capability " + capability
	return cfg
}

// EnsureCapabilityObjects creates or updates a capability's object store
// (CapabilityObjectStore), as Ensure does the others. A new one asked for
// no replica count (o.Replicas 0) gets AX_OBJECTS's, so it is replicated
// like the rest of the topology.
func EnsureCapabilityObjects(ctx context.Context, js jetstream.JetStream, o Options, capability string) error {
	name := "OBJ_" + subject.ObjectBucket(capability)
	_, err := js.Stream(ctx, name)
	switch {
	case err == nil:
		// Created already (its configuration is Ensure's, at start):
		// only make sure of its leader reads. Creating it again would
		// turn direct gets back on for a moment (an object store is
		// created with them), and races other orchestrators.
		return leaderReads(ctx, js, name)
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if o.Replicas <= 0 {
		r, err := replicas(ctx, js, "OBJ_"+subject.BucketObjects, o)
		if err != nil {
			return err
		}
		o.Replicas = r
	}
	err = ensureObjectStore(ctx, js, o, CapabilityObjectStore(o, capability))
	if err != nil {
		// Another orchestrator creating it at the same moment makes this
		// creation fail ("stream name already in use", or no answer on a
		// cluster): if the store exists now, it is that one's.
		if _, lookErr := js.Stream(ctx, name); lookErr == nil {
			return leaderReads(ctx, js, name)
		}
	}
	return err
}

// ensureObjectStore creates or updates one object store, keeping its
// replica count unless asked, and turns its direct gets off.
func ensureObjectStore(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.ObjectStoreConfig) error {
	r, err := replicas(ctx, js, "OBJ_"+cfg.Bucket, o)
	if err != nil {
		return err
	}
	cfg.Replicas = r
	if _, err := js.CreateOrUpdateObjectStore(ctx, cfg); err != nil {
		return fmt.Errorf("ensure object store %s: %w", cfg.Bucket, err)
	}
	return leaderReads(ctx, js, "OBJ_"+cfg.Bucket)
}

// capabilityObjectStores lists the capabilities that have an object store.
func capabilityObjectStores(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	names := js.StreamNames(ctx)
	var out []string
	for name := range names.Name() {
		bucket, isObjects := strings.CutPrefix(name, "OBJ_")
		if c, ok := subject.ObjectBucketCapability(bucket); isObjects && ok {
			out = append(out, c)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list object stores: %w", err)
	}
	return out, nil
}

// ErrFewerReplicas is returned by Ensure when the requested replica count
// is below the existing one and AllowFewerReplicas is not set.
var ErrFewerReplicas = errors.New("refusing to lower the replica count")

// Ensure creates or updates every stream, bucket and object store: the
// orchestrator's job. It is safe to call concurrently from several
// orchestrators. It never lowers a stream's replica count unless
// o.AllowFewerReplicas (see ErrFewerReplicas).
func Ensure(ctx context.Context, js jetstream.JetStream, o Options) error {
	for _, cfg := range Streams(o) {
		if err := ensureStream(ctx, js, o, cfg); err != nil {
			return err
		}
	}
	for _, cfg := range Buckets(o) {
		r, err := replicas(ctx, js, "KV_"+cfg.Bucket, o)
		if err != nil {
			return err
		}
		cfg.Replicas = r
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
		}
		if err := leaderReads(ctx, js, "KV_"+cfg.Bucket); err != nil {
			return err
		}
	}
	for _, cfg := range ObjectStores(o) {
		if err := ensureObjectStore(ctx, js, o, cfg); err != nil {
			return err
		}
	}
	// The capabilities' object stores that exist follow the same options
	// (a replica count, a TTL); new ones are created at their first
	// dispatch (EnsureCapabilityObjects).
	caps, err := capabilityObjectStores(ctx, js)
	if err != nil {
		return err
	}
	for _, c := range caps {
		if err := ensureObjectStore(ctx, js, o, CapabilityObjectStore(o, c)); err != nil {
			return err
		}
	}
	return nil
}

// replicas is the replica count to give stream: the requested one, or the
// existing one when none is requested.
func replicas(ctx context.Context, js jetstream.JetStream, stream string, o Options) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return max(o.Replicas, 1), nil
	}
	if err != nil {
		return 0, fmt.Errorf("ensure stream %s: %w", stream, err)
	}
	have := s.CachedInfo().Config.Replicas
	switch {
	case o.Replicas <= 0:
		return have, nil
	case o.Replicas < have && !o.AllowFewerReplicas:
		return 0, fmt.Errorf("stream %s has %d replicas, this process asks for %d: %w (change it explicitly with `ax topology --replicas %d`)",
			stream, have, o.Replicas, ErrFewerReplicas, o.Replicas)
	}
	return o.Replicas, nil
}

// ensureStream creates one of AX's streams or updates it, keeping what
// JetStream cannot change: its retention (keepRetention) and, for
// AX_READY, its storage — one created on disk stays there, its bounds then
// unset, until it is removed (EnsureReady recreates it, and the reconciler
// dispatches again what it held).
func ensureStream(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.StreamConfig) error {
	r, err := replicas(ctx, js, cfg.Name, o)
	if err != nil {
		return err
	}
	cfg.Replicas = r
	if cfg.Name == subject.StreamTasks {
		// One replica answers everything, so a direct get is a leader
		// read without the JSON API's cost (a raw message, not JSON with
		// base64): the executors' check of every dispatch and most of
		// the orchestrator's reads. With replicas, any of them might
		// answer a direct get from behind: leader reads only.
		cfg.AllowDirect = r == 1
	}
	if err := keepRetention(ctx, js, &cfg); err != nil {
		return err
	}
	if cfg.Name == subject.StreamDLQ && o.DLQMaxAge == 0 {
		// Not asked: keep the retention the cluster has.
		if s, err := js.Stream(ctx, cfg.Name); err == nil {
			cfg.MaxAge = s.CachedInfo().Config.MaxAge
		}
	}
	if cfg.Name == subject.StreamTasks {
		on := o.GroupCommit != nil && *o.GroupCommit
		if o.GroupCommit == nil {
			if s, err := js.Stream(ctx, cfg.Name); err == nil {
				on = groupcommit.Enabled(s.CachedInfo().Config)
			}
		}
		if on {
			cfg.Metadata = map[string]string{groupcommit.MetadataKey: "true"}
		}
	}
	if cfg.Name == subject.StreamReady {
		if s, err := js.Stream(ctx, cfg.Name); err == nil && s.CachedInfo().Config.Storage != cfg.Storage {
			have := s.CachedInfo().Config
			cfg.Storage, cfg.MaxBytes, cfg.MaxMsgsPerSubject = have.Storage, have.MaxBytes, have.MaxMsgsPerSubject
			cfg.Discard, cfg.DiscardNewPerSubject = have.Discard, have.DiscardNewPerSubject
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return nil
}

// EnsureReady creates AX_READY if it is missing: an in-memory one is gone
// after its server restarts (every replica, on a cluster). The orchestrator
// calls it when it finds the stream gone.
func EnsureReady(ctx context.Context, js jetstream.JetStream, o Options) error {
	return ensureStream(ctx, js, o, readyConfig(o, 1, duplicateWindow(o)))
}

// keepRetention keeps an existing stream's retention: JetStream cannot
// change it. AX_SUBMIT, AX_READY and AX_COMPLETED were work queues before
// they were trimmed by consumer position (internal/queue); created by an
// earlier version, they stay work queues and work as before, at the cost of
// one delete per acknowledgement. Recreate them when drained to move.
func keepRetention(ctx context.Context, js jetstream.JetStream, cfg *jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	cfg.Retention = s.CachedInfo().Config.Retention
	return nil
}

// Queues are the streams trimmed by consumer position (internal/queue):
// each message is kept until every consumer reading it acknowledged it.
var Queues = []string{subject.StreamSubmit, subject.StreamReady, subject.StreamCompleted}

// leaderReads turns off direct gets on a bucket's stream (nats.go creates
// buckets with them), so its reads are answered by the stream leader.
func leaderReads(ctx context.Context, js jetstream.JetStream, stream string) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("ensure leader reads on %s: %w", stream, err)
	}
	return nil
}

// ErrMissing means AX's topology does not exist (yet): no orchestrator has
// created it.
var ErrMissing = errors.New("AX's streams do not exist: start an orchestrator (`ax orchestrator`), which creates them")

// Check returns nil when AX's streams, buckets and object stores exist and
// an error wrapping ErrMissing naming the first that does not. It creates
// nothing: executors, clients and the mirror only bind.
func Check(ctx context.Context, js jetstream.JetStream) error {
	names := []string{}
	for _, cfg := range Streams(Options{}) {
		names = append(names, cfg.Name)
	}
	for _, cfg := range Buckets(Options{}) {
		names = append(names, "KV_"+cfg.Bucket)
	}
	for _, cfg := range ObjectStores(Options{}) {
		names = append(names, "OBJ_"+cfg.Bucket)
	}
	for _, name := range names {
		if _, err := js.Stream(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("stream %s not found at %s: %w", name, server(js), ErrMissing)
			}
			return fmt.Errorf("bind stream %s at %s: %w", name, server(js), err)
		}
	}
	return nil
}

// server names the NATS server js talks to, for errors that must say
// which server was asked: its URL without user information.
func server(js jetstream.JetStream) string {
	nc := js.Conn()
	if nc == nil {
		return "an unknown server"
	}
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	return "a server that is not connected"
}

// Await waits until Check passes, retrying with backoff (up to 5 s) and
// calling report before each wait, until ctx ends. Long-running processes
// (executors, the mirror) use it so they can start before the orchestrator
// or during a JetStream outage.
func Await(ctx context.Context, js jetstream.JetStream, report func(err error, wait time.Duration)) error {
	return Retry(ctx, func(ctx context.Context) error { return Check(ctx, js) }, report)
}

// Retry runs f until it returns nil or an error wrapping ErrFewerReplicas,
// waiting 100 ms doubling to 5 s between tries and calling report (may be
// nil) before each wait; it returns ctx's error wrapped with f's last one
// when ctx ends.
func Retry(ctx context.Context, f func(ctx context.Context) error, report func(err error, wait time.Duration)) error {
	wait := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, ErrFewerReplicas) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		}
		if report != nil {
			report(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}
