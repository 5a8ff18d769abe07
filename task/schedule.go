package task

import (
	"fmt"
	"time"
)

// Overlap policies of a schedule.
const (
	// OverlapSkip skips a firing while the previous firing's task has not ended.
	OverlapSkip = "skip"
	// OverlapAllow creates a task at every firing.
	OverlapAllow = "allow"
)

// MaxCatchUp bounds how many missed firings a catch-up schedule replays.
const MaxCatchUp = 1000

// Schedule is a recurring task: its definition and its firing state. It is
// kept in the AX_SCHEDULES key-value bucket under its name.
type Schedule struct {
	// Name identifies the schedule: 1–64 of [A-Za-z0-9_-].
	Name string `json:"name"`
	// Cron is a 5-field (minute first) or 6-field (seconds first) cron
	// expression, a descriptor such as @hourly, or "@every <duration>".
	Cron string `json:"cron"`
	// TimeZone is an IANA zone for the cron fields. Default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Template is the spec of the task each firing creates; its id is
	// replaced by "<name>-<fire time>". Empty when Graph is set.
	Template Spec `json:"template"`
	// Graph, instead of Template, makes each firing create a whole graph
	// (a pipeline): every spec's id — and the depends_on entries naming
	// another of them — becomes "<name>-<fire time>-<id>" (see
	// ScheduledGraph). Its specs need ids; depends_on may name only each
	// other. The overlap policy looks at the graph's last task in
	// dependency order.
	Graph []Spec `json:"graph,omitempty"`
	// Overlap is OverlapSkip (default) or OverlapAllow.
	Overlap string `json:"overlap,omitempty"`
	// CatchUp fires every slot missed while AX was down (up to MaxCatchUp),
	// instead of once.
	CatchUp bool `json:"catch_up,omitempty"`
	// Paused schedules do not fire.
	Paused bool `json:"paused,omitempty"`

	// NextFire is when it fires next (unset while paused).
	NextFire *time.Time `json:"next_fire,omitempty"`
	// LastFire is the last slot handled, and LastTaskID the task it created.
	LastFire   *time.Time `json:"last_fire,omitempty"`
	LastTaskID string     `json:"last_task_id,omitempty"`
	// Skipped counts firings skipped by the overlap policy.
	Skipped int `json:"skipped,omitempty"`
	// ArmID identifies the current chain of timers; a fired timer with
	// another arm id is stale and ignored.
	ArmID string `json:"arm_id,omitempty"`
	// CreatedAt is when the schedule was created.
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the schedule last changed (a firing, a pause…).
	UpdatedAt time.Time `json:"updated_at"`
}

// ValidateDefinition checks the parts a user sets (the cron expression is
// parsed by the orchestrator). maxPayload ≤ 0 means DefaultMaxPayload.
func (s *Schedule) ValidateDefinition(maxPayload int) error {
	if !ValidCapability(s.Name) {
		return &ValidationError{"name", fmt.Sprintf("%q is not 1-64 of [A-Za-z0-9_-]", s.Name)}
	}
	if s.Cron == "" {
		return &ValidationError{"cron", "is empty"}
	}
	switch s.Overlap {
	case "", OverlapSkip, OverlapAllow:
	default:
		return &ValidationError{"overlap", fmt.Sprintf("%q is not %q or %q", s.Overlap, OverlapSkip, OverlapAllow)}
	}
	if len(s.Graph) > 0 {
		return s.validateGraph(maxPayload)
	}
	tmpl := s.Template
	tmpl.ID = s.Name + "-template"
	tmpl.Normalize()
	if len(tmpl.DependsOn) > 0 {
		return &ValidationError{"template.depends_on", "a scheduled task cannot depend on other tasks"}
	}
	if tmpl.Delay > 0 || tmpl.RunAt != nil {
		return &ValidationError{"template", "delay and run_at make no sense on a schedule"}
	}
	if tmpl.Deadline != nil {
		return &ValidationError{"template.deadline", "use ttl on a schedule's template"}
	}
	if err := tmpl.Validate(maxPayload); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	return nil
}
