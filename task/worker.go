package task

import "time"

// Worker is an executor's announcement in the workers registry (the
// AX_WORKERS bucket, one key per executor): what it serves, what runs on
// it now and since when. Executors write it when they start, within a
// second of a handler starting or ending, and at every registry heartbeat;
// it expires (per-key TTL) when they stop heart-beating, and a clean stop
// removes it. It is for operators to see: AX decides nothing from it.
type Worker struct {
	// ID is the executor's id, as task records name it (Task.Executor).
	ID string `json:"id"`
	// Capabilities are the capabilities it pulls.
	Capabilities []string `json:"capabilities"`
	// Types are the task types it has a handler for, sorted.
	Types []string `json:"types"`
	// Capacity is its capacity in estimated-cost units.
	Capacity float64 `json:"capacity"`
	// InFlight is the summed estimated cost of what runs on it now.
	InFlight float64 `json:"in_flight"`
	// Running are the executions whose handler runs now, oldest first (at
	// most MaxWorkerRunning of them; RunningTotal counts them all).
	Running []WorkerExecution `json:"running"`
	// RunningTotal is how many handlers run now.
	RunningTotal int `json:"running_total"`
	// Version is the version of the AX module the executor was built
	// with ("(devel)" for a build from a work tree).
	Version string `json:"version"`
	// Host and PID locate the process.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// StartedAt is when the executor (its current Start) started.
	StartedAt time.Time `json:"started_at"`
	// HeartbeatAt is when this announcement was written.
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// TTL is how long the announcement lives without another heartbeat.
	TTL Duration `json:"ttl"`
}

// MaxWorkerRunning bounds the executions one announcement lists.
const MaxWorkerRunning = 1000

// WorkerExecution is a handler running on an executor now.
type WorkerExecution struct {
	// TaskID and ExecutionID name the attempt.
	TaskID      string `json:"task_id"`
	ExecutionID string `json:"execution_id"`
	// Type and Capability are the task's.
	Type       string `json:"type"`
	Capability string `json:"capability"`
	// Attempt is the attempt's number in its series.
	Attempt int `json:"attempt"`
	// Phase is a shardable task's step (plan or aggregate), "" otherwise.
	Phase string `json:"phase,omitempty"`
	// Since is when its handler started.
	Since time.Time `json:"since"`
	// Progress is the handler's last report of its progress
	// (executor.Job.Progress), nil before any.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is what a running handler last said of its progress.
type Progress struct {
	// Percent is 0–100.
	Percent float64 `json:"percent"`
	// Message says what it is doing (at most MaxProgressMessage bytes).
	Message string `json:"message,omitempty"`
	// At is when the handler reported it.
	At time.Time `json:"at"`
}

// MaxProgressMessage bounds a progress message, in bytes.
const MaxProgressMessage = 200
