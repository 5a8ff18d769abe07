package orchestrator

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/internal/breaker"
	"github.com/ax-run/ax/internal/retry"
	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/task"
)

// Defaults for Config.
const (
	DefaultWorkers = 64
	// DefaultGroupCommitWorkers is Workers' default with group commit on:
	// a worker waiting for its record's batch costs a goroutine, and the
	// more writes wait, the larger (and fewer) the batches.
	DefaultGroupCommitWorkers = 256
	DefaultBatch              = 256
	DefaultAckWait            = 6 * time.Second

	DefaultDispatchCacheBytes   = 64 << 20
	DefaultMaxDeliveries        = 50
	DefaultDependencyTimeout    = 10 * time.Minute
	DefaultReconcileInterval    = time.Minute
	DefaultReconcileMaxInterval = time.Hour
	DefaultRunGrace             = time.Minute
	DefaultFairWindow           = 1024
)

// Config configures an Orchestrator. The zero value is usable.
type Config struct {
	// NodeID names this orchestrator in the audit trail. Default "orchestrator-<host>-<pid>".
	NodeID string
	// Retry is the backoff policy for failed attempts. Defaults: 1s base, ×2,
	// 10m cap, 0–50 % jitter.
	Retry RetryPolicy
	// RetryBudget limits the retries of one task type that may start per
	// window: at most Limit per Width (default 100 per second). Retries over
	// it move to the next window with room, never dropped, so a mass failure
	// turns into a bounded trickle.
	RetryBudget RetryBudget
	// RetryBudgetByType overrides RetryBudget per task type (a type's entry
	// replaces RetryBudget whole; its zero fields take the defaults, not
	// RetryBudget's values). Default nil: every type uses RetryBudget.
	RetryBudgetByType map[string]RetryBudget
	// Breaker configures the per-type circuit breaker: it opens when more
	// than Threshold of the attempts in Window failed (with at least
	// MinVolume attempts), holds the type's tasks for Cooldown, then lets
	// Probes through. Defaults: 50 %, 1m, 20, 30s, 3. A Threshold of 1 or
	// more disables it (a ratio never exceeds 1).
	Breaker BreakerConfig
	// MaxPayload is the largest accepted payload in bytes (with a codec,
	// of the encoded form). Default 256 KiB (task.DefaultMaxPayload); it
	// may be raised. The other limits on one submitter are in Limits.
	MaxPayload int
	// Limits bound graphs, dependencies, shards and distinct task types;
	// see Limits for each default. New refuses a value above its ceiling.
	Limits Limits
	// KeyLimits are the limits per key (task.KeyLimit) from configuration:
	// concurrency and rate limits on concurrency keys, weights of
	// fairness keys. A limit set at run time (ax limits set,
	// sdk.Client.SetLimit) replaces the one of the same pattern. Give
	// every orchestrator the same list.
	KeyLimits []task.KeyLimit
	// FairWindow bounds the dispatches one capability and priority may
	// hold waiting for an executor before the ready tasks with a fairness
	// key queue in the orchestrator and are dispatched in turn by key
	// (weighted) as the level drains. Within it the window follows the
	// level's drain: about a second of what its executors take (at least
	// 4), so a key's task waits about a second behind another key's
	// backlog whatever the handlers' time. Default 1024; negative: no
	// fairness, every task is dispatched at once.
	FairWindow int
	// AcceptTokenless accepts reports, claims and leases that carry no
	// execution token, from executors older than the orchestrator, while
	// they are upgraded. A wrong token is refused all the same. Default
	// false: an executor may report, claim and hold a lease only for an
	// execution it was dispatched.
	AcceptTokenless bool
	// Workers bounds concurrently handled messages per consumer, and the
	// direct requests handled at once. Default 64, or 256 with group commit
	// on (TopologyOptions.GroupCommit).
	Workers int
	// Batch is the pull batch size. Default 256.
	Batch int
	// AckWait is how long a message may be in hand before it is redelivered
	// to another orchestrator: what a kill -9 of an orchestrator delays the
	// messages it held by. A handler that runs longer extends its message's
	// lease every third of it, and an orchestrator buffers no more messages
	// ahead of its handlers than it has workers. Default 6s.
	AckWait time.Duration
	// DependencyTimeout is how long a task waits for an upstream that does
	// not exist (its submission may still be in flight) before it is
	// cancelled naming the missing id; a spec's dependency_timeout
	// overrides it. Default 10m.
	DependencyTimeout time.Duration
	// ReconcileInterval is how long an unfinished task may go without
	// moving before the reconciler first looks at it (its watch timer);
	// later looks back off, doubling with the time it has not moved, up to
	// ReconcileMaxInterval. Defaults 1m and 1h.
	ReconcileInterval    time.Duration
	ReconcileMaxInterval time.Duration
	// RunGrace is how long past start + timeout a running task may go on
	// without a live lease before the reconciler fails the attempt with
	// "lease expired" (its executor is gone and its dispatch will not be
	// redelivered). Default 1m.
	RunGrace time.Duration
	// MaxDeliveries is how often a message is delivered to a handler that
	// keeps failing (with growing delays, about 8 minutes at the default)
	// before it is kept as poison on AX_POISON for an operator to inspect
	// and re-drive (`ax poison`), instead of looping for ever. A handler
	// failing only because NATS or JetStream does not answer (an outage)
	// is tried every 2 s at most and kept as poison after ten times as
	// many deliveries (consume.UnavailableDeliveries: about 17 minutes).
	// Default 50.
	MaxDeliveries uint64
	// DispatchCacheBytes bounds the memory of the recent dispatches kept so
	// a report is applied without reading its task (an entry lost costs one
	// read). Default 64 MiB.
	DispatchCacheBytes int64
	// Topology tunes the streams created at start.
	Topology TopologyOptions
	// DeadLetterRetention keeps the dead letters of a task type shorter
	// than Topology.DLQMaxAge, by type: each is stored with that TTL (a
	// longer one than the stream's max age changes nothing). The task's
	// record stays failed and may still be re-driven. Default nil: every
	// type as long as the stream keeps them.
	DeadLetterRetention map[string]time.Duration
	// Metrics receives the orchestrator's measurements (package
	// orchestrator/promorch exports them to Prometheus). Default nil:
	// none, and JetStream is not sampled.
	Metrics Metrics
	// TracerProvider receives the orchestrator's spans (see
	// internal/tracing). Default nil: the global provider, a no-op unless
	// the program set one; a producer's trace context is passed on anyway.
	TracerProvider trace.TracerProvider
	// SampleInterval is how often, with Metrics set, the orchestrator reads
	// backlogs, timers and dead letters from JetStream into its gauges.
	// Default 5s.
	SampleInterval time.Duration
	// Logger receives structured logs (keys in snake_case: task_id,
	// execution_id, type…); every record carries the orchestrator's node id
	// as "node". Default nil: no logs.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Random returns uniform numbers in [0,1) for retry jitter. Default math/rand/v2.
	Random func() float64

	// eventsPerMessage bounds the event waiters one message handles
	// (default eventWaitersPerMessage; lowered by tests).
	eventsPerMessage int
}

// config is a Config with defaults applied and its public policy types
// converted to the internal packages that implement them. Its fields shadow
// Config's of the same name; every other field is Config's.
type config struct {
	Config
	Retry             retry.Policy
	RetryBudget       window.Policy
	RetryBudgetByType map[string]window.Policy
	Breaker           breaker.Config
	Topology          topology.Options
	// defaultWorkers: Workers was not set, so group commit may raise it.
	defaultWorkers bool
}

func (c Config) withDefaults() config {
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("orchestrator-%s-%d", host, os.Getpid())
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = task.DefaultMaxPayload
	}
	c.Limits = c.Limits.withDefaults()
	if c.eventsPerMessage <= 0 {
		c.eventsPerMessage = eventWaitersPerMessage
	}
	if c.FairWindow == 0 {
		c.FairWindow = DefaultFairWindow
	}
	defaultWorkers := c.Workers <= 0
	if defaultWorkers {
		c.Workers = DefaultWorkers
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.DispatchCacheBytes <= 0 {
		c.DispatchCacheBytes = DefaultDispatchCacheBytes
	}
	if c.DependencyTimeout <= 0 {
		c.DependencyTimeout = DefaultDependencyTimeout
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ReconcileMaxInterval < c.ReconcileInterval {
		c.ReconcileMaxInterval = max(DefaultReconcileMaxInterval, c.ReconcileInterval)
	}
	if c.RunGrace <= 0 {
		c.RunGrace = DefaultRunGrace
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Random == nil {
		c.Random = randFloat
	}
	out := config{Config: c,
		Retry:       retry.Policy(c.Retry).WithDefaults(),
		RetryBudget: window.Policy(c.RetryBudget),
		Breaker:     breaker.Config(c.Breaker),
		Topology:    topology.Options(c.Topology), defaultWorkers: defaultWorkers}
	if c.RetryBudgetByType != nil {
		out.RetryBudgetByType = make(map[string]window.Policy, len(c.RetryBudgetByType))
		for typ, p := range c.RetryBudgetByType {
			out.RetryBudgetByType[typ] = window.Policy(p)
		}
	}
	return out
}
