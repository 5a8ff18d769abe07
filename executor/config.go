package executor

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/internal/swrr"
	"github.com/ax-run/ax/task"
)

// Defaults for Config: a zero field means these.
const (
	// DefaultCapacity is Config.Capacity's default, in cost units.
	DefaultCapacity = 16.0
	// DefaultAckWait is Config.AckWait's default.
	DefaultAckWait = 30 * time.Second
	// DefaultMaxBatch is Config.MaxBatch's default.
	DefaultMaxBatch = 256
	// DefaultIdleProbe is Config.IdleProbe's default.
	DefaultIdleProbe = 5 * time.Second
	// DefaultMaxTakeovers is Config.MaxTakeovers's default: it bounds
	// take-overs of one attempt.
	DefaultMaxTakeovers = 3
)

// DefaultWeights returns the pull weights of priorities p0…p5: 40, 25, 15,
// 10, 6, 4.
func DefaultWeights() [task.Levels]int { return swrr.PriorityWeights() }

// Config configures an Executor. The zero value is usable: every zero
// field means its documented default.
type Config struct {
	// ID names this executor in task records. Default "executor-<host>-<pid>-<random>".
	ID string
	// Capabilities this executor serves; it receives only tasks routed to
	// them. Default ["default"].
	Capabilities []string
	// Capacity in cost units: the executor pulls only while the summed
	// estimated_cost of its running tasks is below it. A task counts from
	// its delivery until its handler returns; reporting its outcome takes one
	// of 4×Capacity (at least 64) report slots instead. Default 16.
	Capacity float64
	// Weights are the pull weights of p0…p5 (smooth weighted round robin
	// across non-empty levels). Default 40/25/15/10/6/4.
	Weights [task.Levels]int
	// AckWait is how long a task may run without a heartbeat before it is
	// redelivered to another executor. Shared by all executors of a
	// capability (the last one to start sets it). Default 30s.
	AckWait time.Duration
	// Heartbeat is how often a running task's lease is extended. Default AckWait/3.
	Heartbeat time.Duration
	// MaxBatch bounds one pull. Default 256.
	MaxBatch int
	// IdleProbe is how often an idle executor re-checks its queues besides
	// being woken by new work (it catches redeliveries). Default 5s.
	IdleProbe time.Duration
	// MaxTakeovers is how often one attempt may be taken over from an
	// executor that stopped heart-beating before it is failed instead of
	// run again (a task that kills its executor would loop forever).
	// Default 3.
	MaxTakeovers int
	// Metrics receives the executor's measurements (attempts, handler run
	// times, in-flight cost) for any metrics backend; package
	// executor/promexec exports them to Prometheus. Default nil: none.
	Metrics Metrics
	// Logger receives structured logs (keys task_id, execution_id,
	// attempt, capability…). Default nil: none.
	Logger *slog.Logger
	// Hooks wrap every attempt's handler call, the first outermost:
	// per-capability metrics (executor/promexec), tracing
	// (executor/exectrace), logging. Default none.
	Hooks []AttemptHook
	// Codec decodes each task's payload before its handler sees
	// Job.Payload, and encodes the shard payloads a planner returns; use
	// the producers' codec (sdk.Client.Codec). A payload that does not
	// decode fails its attempt permanently, naming the cause (wrap the
	// codec with codec.AcceptClear to run payloads submitted in clear
	// too). Results are not encoded. Default nil: payloads as submitted;
	// an encoded one (a JSON object with an "ax_codec" member) then fails
	// its task permanently, naming its key id (ErrNoCodec), and its
	// handler is not run.
	Codec codec.Codec
	// AnnounceInterval is how often the executor rewrites its
	// announcement in the workers registry (`ax workers`, the console's
	// Workers page) when nothing changes; a handler starting or ending, or
	// reporting progress, is announced within a quarter second. An
	// announcement lives three intervals, so the executor of a process
	// that died disappears then; Stop removes it at once. Default
	// DefaultAnnounceInterval (5s); negative: no announcements.
	AnnounceInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("executor-%s-%d-%s", host, os.Getpid(), nuid.Next()[16:])
	}
	if len(c.Capabilities) == 0 {
		c.Capabilities = []string{task.DefaultCapability}
	}
	for _, capability := range c.Capabilities {
		if !task.ValidCapability(capability) {
			return c, fmt.Errorf("executor: invalid capability %q", capability)
		}
	}
	if c.Capacity <= 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Weights == ([task.Levels]int{}) {
		c.Weights = DefaultWeights()
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.AckWait {
		c.Heartbeat = c.AckWait / 3
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.IdleProbe <= 0 {
		c.IdleProbe = DefaultIdleProbe
	}
	if c.MaxTakeovers <= 0 {
		c.MaxTakeovers = DefaultMaxTakeovers
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AnnounceInterval == 0 {
		c.AnnounceInterval = DefaultAnnounceInterval
	}
	return c, nil
}
