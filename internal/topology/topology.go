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
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
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
	// GroupCommit, when set, turns group commit on or off for the whole
	// deployment, recorded in AX_TASKS' metadata (groupcommit.MetadataKey):
	// orchestrators batch the record writes that queue up, and the SDK
	// stores large SubmitMany calls as atomic batches, each stored with one
	// fsync by a single-node server that syncs every write (a batch costs
	// more than its writes on a server that does not). nil keeps what
	// AX_TASKS says (off when it is created). Processes read it at start.
	GroupCommit *bool
}

// duplicateWindow is the de-duplication window of the queue streams.
func duplicateWindow(o Options) time.Duration {
	if o.DuplicateWindow <= 0 {
		return 2 * time.Minute
	}
	return o.DuplicateWindow
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
			Subjects:          []string{subject.HeldAll, subject.SlotWaitAll, subject.EventWaitAll},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
		},
		{
			Name:        subject.StreamEvents,
			Description: "AX events that event tasks (wait_for) wait for: the latest event of each subject, kept 7 days",
			Subjects:    []string{subject.EventAll},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			// An event is the value of its subject: a later one replaces it.
			MaxMsgsPerSubject: 1,
			MaxAge:            EventMaxAge,
			MaxMsgSize:        task.MaxEventData,
			Duplicates:        dup,
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
		{Bucket: subject.BucketRevoked, Description: "AX executions revoked by the orchestrators (cancelled or expired tasks), watched by executors", History: 1,
			TTL: RevokedTTL, Storage: jetstream.FileStorage, Replicas: r},
		workersBucket(r),
	}
}

// RevokedTTL is how long a revoked execution is remembered (AX_REVOKED):
// a dispatch of a cancelled task still queued after it would run (its
// outcome ignored).
const RevokedTTL = 7 * 24 * time.Hour

// EventMaxAge is how long AX_EVENTS keeps an event: a task that registers
// its wait_for later than this after the event's publication does not
// find it.
const EventMaxAge = 7 * 24 * time.Hour

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

// ReadyAckWait is the ack wait the ready consumers are created with (an
// executor's lease of a dispatch; executors set their own, Config.AckWait,
// when they bind) and ReadyMaxAckPending bounds the dispatches of one level
// that executors hold at once.
const (
	ReadyAckWait       = 30 * time.Second
	ReadyMaxAckPending = 65536
)

// ReadyConsumer returns the configuration of a capability's ready consumer
// of one priority level: the durable pull consumer on AX_TASKS that its
// executors share, reading its dispatches (subject.DispatchFilter), with
// ackWait as the executors' lease. It delivers only the dispatches stored
// after its creation (DeliverNew): a task history is kept, and a consumer
// created again must not hand out the dispatches of tasks that ran long
// ago (a dispatch stored while it was missing is found by the reconciler).
func ReadyConsumer(capability string, priority int, ackWait time.Duration) jetstream.ConsumerConfig {
	if ackWait <= 0 {
		ackWait = ReadyAckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       subject.ReadyConsumer(capability, priority),
		FilterSubject: subject.DispatchFilter(capability, priority),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxAckPending: ReadyMaxAckPending,
		DeliverPolicy: jetstream.DeliverNewPolicy,
	}
}

// CapabilityExists reports whether a capability's object store and its six
// ready consumers all exist, from the lists of stream names and of
// AX_TASKS's consumer names (tasks), which the cluster's meta leader
// answers: unlike looking each up, no stream's or consumer's own leader,
// which under faults may be missing for seconds, has to answer.
func CapabilityExists(ctx context.Context, js jetstream.JetStream, tasks jetstream.Stream, capability string) (bool, error) {
	found := false
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		found = found || name == "OBJ_"+subject.ObjectBucket(capability)
	}
	if err := names.Err(); err != nil {
		return false, fmt.Errorf("list streams: %w", err)
	}
	if !found {
		return false, nil
	}
	want := make(map[string]bool)
	for p := range subject.Priorities {
		want[subject.ReadyConsumer(capability, p)] = true
	}
	consumers := tasks.ConsumerNames(ctx)
	for name := range consumers.Name() {
		delete(want, name)
	}
	if err := consumers.Err(); err != nil {
		return false, fmt.Errorf("list the consumers of %s: %w", subject.StreamTasks, err)
	}
	return len(want) == 0, nil
}

// EnsureReadyConsumers creates a capability's six ready consumers
// (ReadyConsumer) that do not exist yet, and leaves those that do as they
// are (their executors set their ack wait). The orchestrator calls it
// before the capability's first dispatch, so that dispatch is delivered.
func EnsureReadyConsumers(ctx context.Context, js jetstream.JetStream, capability string) error {
	st, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.StreamTasks, err)
	}
	for p := range subject.Priorities {
		cfg := ReadyConsumer(capability, p, 0)
		_, err := st.Consumer(ctx, cfg.Durable)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("look up ready consumer %s: %w", cfg.Durable, err)
		}
		if _, err := st.CreateConsumer(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			// Another orchestrator or an executor created it meanwhile.
			if _, lookErr := st.Consumer(ctx, cfg.Durable); lookErr != nil {
				return fmt.Errorf("create ready consumer %s: %w", cfg.Durable, err)
			}
		}
	}
	return nil
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
	return NewEnsurer(js, o).Ensure(ctx)
}

// An Ensurer runs Ensure in steps — a stream, a bucket, an object store —
// and remembers the steps done: called again after an error, it resumes at
// the step that failed. Under faults (a node down, a partition) some of
// Ensure's ~60 requests time out; started over each time, an orchestrator
// restarted during a chaos run took 67 s to get through them all at once.
type Ensurer struct {
	js    jetstream.JetStream
	o     Options
	steps Steps
}

// NewEnsurer returns an Ensurer of the topology o on js.
func NewEnsurer(js jetstream.JetStream, o Options) *Ensurer {
	return &Ensurer{js: js, o: o}
}

// Ensure creates or updates what is not done yet (see the package's Ensure).
// It is not safe for concurrent use.
func (e *Ensurer) Ensure(ctx context.Context) error {
	js, o := e.js, e.o
	var streams []Step
	for _, cfg := range Streams(o) {
		streams = append(streams, Step{"stream " + cfg.Name, func() error { return ensureStream(ctx, js, o, cfg) }})
	}
	if err := e.steps.Run(streams, ensureConcurrency); err != nil {
		return err
	}
	var buckets []Step
	for _, cfg := range Buckets(o) {
		buckets = append(buckets, Step{"bucket " + cfg.Bucket, func() error { return ensureBucket(ctx, js, o, cfg) }})
	}
	if err := e.steps.Run(buckets, ensureConcurrency); err != nil {
		return err
	}
	var stores []Step
	for _, cfg := range ObjectStores(o) {
		stores = append(stores, Step{"objects " + cfg.Bucket, func() error { return ensureObjectStore(ctx, js, o, cfg) }})
	}
	if err := e.steps.Run(stores, ensureConcurrency); err != nil {
		return err
	}
	// The capabilities' object stores that exist follow the same options
	// (a replica count, a TTL); new ones are created at their first
	// dispatch (EnsureCapabilityObjects).
	caps, err := capabilityObjectStores(ctx, js)
	if err != nil {
		return err
	}
	stores = nil
	for _, c := range caps {
		cfg := CapabilityObjectStore(o, c)
		stores = append(stores, Step{"objects " + cfg.Bucket, func() error { return ensureObjectStore(ctx, js, o, cfg) }})
	}
	return e.steps.Run(stores, ensureConcurrency)
}

// Missing lists the streams, buckets and object stores of the topology
// that do not exist, from one list of stream names, which the cluster's
// meta leader answers: a stream without a leader of its own is listed.
// An orchestrator whose topology all exists serves while Ensure brings
// it to its configuration (the orchestrator's start, deploy/README).
func (e *Ensurer) Missing(ctx context.Context) ([]string, error) {
	have := make(map[string]bool)
	names := e.js.StreamNames(ctx)
	for name := range names.Name() {
		have[name] = true
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	var want []string
	for _, cfg := range Streams(e.o) {
		want = append(want, cfg.Name)
	}
	for _, cfg := range Buckets(e.o) {
		want = append(want, "KV_"+cfg.Bucket)
	}
	for _, cfg := range ObjectStores(e.o) {
		want = append(want, "OBJ_"+cfg.Bucket)
	}
	var missing []string
	for _, name := range want {
		if !have[name] {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

// ensureConcurrency bounds the steps of a kind run at once.
const ensureConcurrency = 8

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
	return replicasOf(s.CachedInfo().Config, o)
}

// replicasOf is replicas for the existing stream cur.
func replicasOf(cur jetstream.StreamConfig, o Options) (int, error) {
	have := cur.Replicas
	switch {
	case o.Replicas <= 0:
		return have, nil
	case o.Replicas < have && !o.AllowFewerReplicas:
		return 0, fmt.Errorf("stream %s has %d replicas, this process asks for %d: %w (change it explicitly with `ax topology --replicas %d`)",
			cur.Name, have, o.Replicas, ErrFewerReplicas, o.Replicas)
	}
	return o.Replicas, nil
}

// TaskLayoutKey is the AX_TASKS metadata entry that says which layout of
// task histories the stream holds: TaskLayout ("2": every task's events
// on ax.task.<id>.e and its dispatches on ax.task.<id>.d.…) once no history
// of the earlier layout (ax.task.<id>) is left unmigrated. A new stream is
// created with it; an existing one gets it from the orchestrator (when it
// holds no legacy history) or from `ax migrate tasks`.
const (
	TaskLayoutKey = "ax.task_layout"
	TaskLayout    = "2"
)

// SetTaskLayout records on AX_TASKS that its histories are all in the
// current layout (TaskLayoutKey).
func SetTaskLayout(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.StreamTasks, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Metadata[TaskLayoutKey] == TaskLayout {
		return nil
	}
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	cfg.Metadata[TaskLayoutKey] = TaskLayout
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("record the task layout on %s: %w", subject.StreamTasks, err)
	}
	return nil
}

// ensureStream creates one of AX's streams or updates it, keeping what
// JetStream cannot change: its retention (keepRetention).
func ensureStream(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.StreamConfig) error {
	r, err := replicas(ctx, js, cfg.Name, o)
	if err != nil {
		return err
	}
	cfg.Replicas = r
	if cfg.Name == subject.StreamTasks {
		// One replica answers everything, so a direct get is a leader
		// read without the JSON API's cost (a raw message, not JSON with
		// base64): most of the orchestrator's reads. With replicas, any of them might
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
		s, err := js.Stream(ctx, cfg.Name)
		exists := err == nil
		on := o.GroupCommit != nil && *o.GroupCommit
		cfg.Metadata = map[string]string{}
		if exists {
			have := s.CachedInfo().Config
			if o.GroupCommit == nil {
				on = groupcommit.Enabled(have)
			}
			if v, ok := have.Metadata[TaskLayoutKey]; ok {
				cfg.Metadata[TaskLayoutKey] = v
			}
		} else {
			// A new AX_TASKS holds no history of an earlier layout.
			cfg.Metadata[TaskLayoutKey] = TaskLayout
		}
		if on {
			cfg.Metadata[groupcommit.MetadataKey] = "true"
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	return nil
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
var Queues = []string{subject.StreamSubmit, subject.StreamCompleted}

// ensureBucket creates a bucket, or brings an existing one's stream to
// cfg, without direct gets. An existing stream is updated as a stream, not
// as a bucket: nats.go's bucket update turns direct gets on (its bucket
// configuration always allows them), and leaderReads turned them off only
// after it. Anything that bound the bucket in between read it directly
// from then on: from any replica, even one behind, and, once direct gets
// were off again, from nobody ("no responders"). A chaos run saw an
// orchestrator restarted while the store was slow do this: its second
// step timed out, and the orchestrator's every read of the concurrency
// slots failed for the minute until it was killed again.
func ensureBucket(ctx context.Context, js jetstream.JetStream, o Options, cfg jetstream.KeyValueConfig) error {
	name := "KV_" + cfg.Bucket
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg.Replicas = max(o.Replicas, 1)
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
		}
		// New, and so bound by nobody yet who would keep its direct gets.
		return leaderReads(ctx, js, name)
	}
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", name, err)
	}
	cur := st.CachedInfo().Config
	want := bucketStream(cur, cfg)
	if want.Replicas, err = replicasOf(cur, o); err != nil {
		return err
	}
	if reflect.DeepEqual(cur, want) {
		return nil
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
	}
	return nil
}

// bucketStream is the stream cur of a bucket with what cfg sets of it
// applied, as nats.go's bucket configuration sets it, and without direct
// gets.
func bucketStream(cur jetstream.StreamConfig, cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	want := cur
	want.Description = cfg.Description
	want.MaxMsgsPerSubject = int64(max(cfg.History, 1))
	want.MaxAge = cfg.TTL
	want.MaxBytes = cmp.Or(cfg.MaxBytes, -1)
	want.MaxMsgSize = cmp.Or(cfg.MaxValueSize, -1)
	want.Duplicates = 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < want.Duplicates {
		want.Duplicates = cfg.TTL
	}
	if cfg.LimitMarkerTTL != 0 {
		want.AllowMsgTTL, want.SubjectDeleteMarkerTTL = true, cfg.LimitMarkerTTL
	}
	want.AllowDirect = false
	return want
}

// leaderReads turns off direct gets on a new bucket's stream (nats.go
// creates buckets with them), so its reads are answered by the stream
// leader.
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

// ErrPermanent is wrapped by errors no retry can cure (an operator must
// act): Retry returns them at once. ErrFewerReplicas is one.
var ErrPermanent = errors.New("operator action needed")

// Retry runs f until it returns nil or an error wrapping ErrPermanent or
// ErrFewerReplicas, waiting 100 ms doubling to 5 s between tries and
// calling report (may be nil) before each wait; it returns ctx's error
// wrapped with f's last one when ctx ends.
func Retry(ctx context.Context, f func(ctx context.Context) error, report func(err error, wait time.Duration)) error {
	return RetryUpTo(ctx, 5*time.Second, f, report)
}

// RetryUpTo is Retry with the waits between tries capped at maxWait. A
// process that holds up work while it retries (an orchestrator starting)
// caps them low: each try is bounded by the client's request timeout
// already, and a step should not wait out seconds after the cluster
// answers again.
func RetryUpTo(ctx context.Context, maxWait time.Duration, f func(ctx context.Context) error, report func(err error, wait time.Duration)) error {
	wait := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, ErrFewerReplicas) || errors.Is(err, ErrPermanent) {
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
		wait = min(2*wait, maxWait)
	}
}
