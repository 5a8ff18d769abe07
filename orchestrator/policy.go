package orchestrator

import "time"

// Defaults of the policies in Config.
const (
	// DefaultRetryBase is the delay before the first retry.
	DefaultRetryBase = time.Second
	// DefaultRetryFactor multiplies the delay for each further retry.
	DefaultRetryFactor = 2.0
	// DefaultRetryMax caps the delay between retries (before jitter).
	DefaultRetryMax = 10 * time.Minute
	// DefaultRetryJitter is the largest random fraction added to a delay.
	DefaultRetryJitter = 0.5

	// DefaultRetryBudgetLimit is how many retries of one task type may start
	// per DefaultRetryBudgetWidth.
	DefaultRetryBudgetLimit = 100
	// DefaultRetryBudgetWidth is the width of a retry budget's window.
	DefaultRetryBudgetWidth = time.Second

	// DefaultBreakerWindow is the span of a breaker's sliding window.
	DefaultBreakerWindow = time.Minute
	// DefaultBreakerThreshold is the failure ratio above which a breaker opens.
	DefaultBreakerThreshold = 0.5
	// DefaultBreakerMinVolume is the number of outcomes a window must hold
	// before the breaker can open.
	DefaultBreakerMinVolume = 20
	// DefaultBreakerCooldown is how long an open breaker holds its type.
	DefaultBreakerCooldown = 30 * time.Second
	// DefaultBreakerProbes is the number of tasks a half-open breaker lets through.
	DefaultBreakerProbes = 3
	// DefaultBreakerProbeTimeout bounds how long a half-open breaker waits
	// for its probes' outcomes before starting over with fresh probes.
	DefaultBreakerProbeTimeout = time.Minute

	// DefaultDuplicateWindow is the submit stream's de-duplication window.
	DefaultDuplicateWindow = 2 * time.Minute
)

// RetryPolicy is the exponential backoff between the attempts of a task:
// retry n waits Base × Factor^(n-1), capped at Max, plus a random 0…Jitter
// fraction of that. The zero value means every default.
type RetryPolicy struct {
	// Base is the delay before the first retry. Zero or negative:
	// DefaultRetryBase (1s).
	Base time.Duration
	// Factor multiplies the delay for each further retry. Below 1:
	// DefaultRetryFactor (2).
	Factor float64
	// Max caps the delay before jitter. Zero or negative: DefaultRetryMax (10m).
	Max time.Duration
	// Jitter is the largest random fraction added to the delay (0.5 adds
	// 0–50 %). Zero: DefaultRetryJitter (0.5); negative: no jitter.
	Jitter float64
}

// RetryBudget limits how many retries of one task type may start per
// window: at most Limit per Width. Retries over it move to the next window
// with room; none is dropped. The zero value means every default.
type RetryBudget struct {
	// Limit is the number of retries per window. Zero or negative:
	// DefaultRetryBudgetLimit (100).
	Limit int
	// Width is the window's length. Zero or negative:
	// DefaultRetryBudgetWidth (1s).
	Width time.Duration
}

// BreakerConfig configures the circuit breaker of each task type: it opens
// when more than Threshold of the attempts in Window failed (with at least
// MinVolume attempts), holds the type's new and retrying tasks for
// Cooldown, then lets Probes tasks through and closes when they succeed.
// The zero value means every default.
type BreakerConfig struct {
	// Window is the span of the sliding window of outcomes. Zero or
	// negative: DefaultBreakerWindow (1m).
	Window time.Duration
	// Threshold is the failure ratio above which the breaker opens. Zero,
	// negative or NaN: DefaultBreakerThreshold (0.5). 1 or more disables the
	// breaker (a ratio never exceeds 1).
	Threshold float64
	// MinVolume is the number of outcomes the window must hold before the
	// breaker can open. Zero or negative: DefaultBreakerMinVolume (20).
	MinVolume int
	// Cooldown is how long the breaker stays open before turning half-open.
	// Zero or negative: DefaultBreakerCooldown (30s).
	Cooldown time.Duration
	// Probes is the number of tasks let through while half-open, and the
	// number of successes among them that close the breaker. Zero or
	// negative: DefaultBreakerProbes (3).
	Probes int
	// ProbeTimeout bounds half-open: when its probes' outcomes have not all
	// arrived this long after it turned half-open, it starts over with a
	// fresh set of probes. Zero or negative: DefaultBreakerProbeTimeout (1m).
	ProbeTimeout time.Duration
}

// TopologyOptions tunes the JetStream streams, buckets and object stores
// the orchestrator creates or updates at start. The zero value keeps a
// cluster's existing replication and uses every default.
type TopologyOptions struct {
	// Replicas is the replication factor. Zero keeps what the streams have
	// (1 when creating them). A count below the existing one is refused
	// unless AllowFewerReplicas is set: replication is the cluster's
	// configuration, and a process started with defaults must not lower it.
	Replicas int
	// AllowFewerReplicas lets Start lower the replica count.
	AllowFewerReplicas bool
	// DuplicateWindow is the submit stream's de-duplication window. Zero:
	// DefaultDuplicateWindow (2m).
	DuplicateWindow time.Duration
	// DLQMaxAge is how long AX_DLQ keeps a dead letter (a re-drive or
	// `ax dlq rm` removes it sooner; Config.DeadLetterRetention shortens it
	// per task type). Zero keeps what the stream has (for ever when
	// creating it); negative: for ever.
	DLQMaxAge time.Duration
	// TaskHistoryMaxAge is how long the history of a finished task is kept
	// after it finished (unfinished tasks are never removed); it is also
	// the age at which plans and large results expire. Zero: for ever.
	TaskHistoryMaxAge time.Duration
	// GroupCommit, when set, turns group commit on or off for the whole
	// deployment (recorded on AX_TASKS, read by every orchestrator and SDK
	// client at start; nil keeps what is recorded, off at first): the
	// record writes that queue up behind those in flight go as one atomic
	// batch, and the SDK stores a SubmitMany of more than 32 specs as
	// atomic batches. A single-node server with sync_interval: always
	// (NATS 2.15 or newer) stores a batch with one fsync, so under load
	// the batches grow until the disk keeps up; on other servers a batch
	// costs more than its writes. See deploy/README.md, "Durability".
	GroupCommit *bool
}
