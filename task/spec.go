package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ax-run/ax/internal/wirejson"
)

// Defaults applied to a spec's absent fields.
const (
	DefaultPriority      = 2
	DefaultCapability    = "default"
	DefaultMaxRetries    = 5
	DefaultTimeout       = 10 * time.Minute
	DefaultEstimatedCost = 1.0

	// MaxPriority is the lowest priority level (0 is the highest).
	MaxPriority = 5
	// Levels is the number of priority levels.
	Levels = MaxPriority + 1
	// MaxRetriesLimit bounds max_retries so a record's attempt history stays small.
	MaxRetriesLimit = 100
	// MaxDependencies bounds depends_on.
	MaxDependencies = 1000
	// DefaultMaxPayload is the largest payload accepted unless configured otherwise.
	DefaultMaxPayload = 256 << 10
	// DefaultMaxDispatches applies when a dispatch timeout is set.
	DefaultMaxDispatches = 3
	// MaxUniqueKeyLen bounds unique_key, in bytes.
	MaxUniqueKeyLen = 256
	// MinUniqueWindow and MaxUniqueWindow bound unique_window.
	MinUniqueWindow = time.Second
	MaxUniqueWindow = 366 * 24 * time.Hour
)

// Spec is what a producer submits on task.submit.<type>. JSON field names are
// the wire contract documented in subjects.md.
//
// The zero value of every field means its documented default, in Go as in
// JSON, where the default applies to an absent field: a Spec{ID: "a", Type:
// "t"} literal runs at DefaultPriority with DefaultMaxRetries, exactly like
// the JSON {"id":"a","type":"t"}. Priority and MaxRetries are pointers
// because their zero is a meaningful value of its own: set them with new,
// as in Priority: new(0) (the highest priority) or MaxRetries: new(0) (no
// retry), and read them with PriorityLevel and RetryLimit, which apply the
// defaults.
type Spec struct {
	// ID is chosen by the client; the SDK generates a sortable unique one when empty.
	ID string `json:"id"`
	// Type names the handler that runs the task.
	Type string `json:"type"`
	// Payload is any JSON value handed to the handler.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Priority is 0 (highest) … MaxPriority (lowest). Nil: DefaultPriority (2).
	Priority *int `json:"priority,omitempty"`
	// Capability routes the task to executors that declared it. Empty:
	// DefaultCapability ("default").
	Capability string `json:"capability,omitempty"`
	// DependsOn lists task ids that must succeed before this task is ready.
	DependsOn []string `json:"depends_on,omitempty"`
	// MaxRetries is how many retries follow a failed first attempt, 0 …
	// MaxRetriesLimit. Nil: DefaultMaxRetries (5); new(0): no retry.
	MaxRetries *int `json:"max_retries,omitempty"`
	// Timeout bounds one execution attempt. Zero: DefaultTimeout (10m).
	Timeout Duration `json:"timeout,omitempty"`
	// EstimatedCost is the task's weight against an executor's capacity.
	// Zero: DefaultEstimatedCost (1).
	EstimatedCost float64 `json:"estimated_cost,omitempty"`

	// Delay holds the task until this long after it was accepted. Zero: no delay.
	Delay Duration `json:"delay,omitempty"`
	// RunAt holds the task until this time. At most one of Delay and RunAt.
	RunAt *time.Time `json:"run_at,omitempty"`
	// Deadline expires the task if it has not finished by then.
	Deadline *time.Time `json:"deadline,omitempty"`
	// TTL expires the task if it has not finished this long after it was
	// accepted. At most one of Deadline and TTL. Zero: no TTL.
	TTL Duration `json:"ttl,omitempty"`
	// DispatchTimeout re-dispatches a ready task no executor started within
	// it (new execution id), up to MaxDispatches times, then fails it.
	// Zero: no dispatch timeout.
	DispatchTimeout Duration `json:"dispatch_timeout,omitempty"`
	// MaxDispatches bounds dispatches per attempt when DispatchTimeout is
	// set, 0 … 100. Zero: DefaultMaxDispatches (3).
	MaxDispatches int `json:"max_dispatches,omitempty"`
	// DependencyTimeout is how long the task waits for an upstream in
	// DependsOn that does not exist (its submission may still be in
	// flight) before it is cancelled naming the missing id. Zero: the
	// orchestrator's default (10 minutes unless configured).
	DependencyTimeout Duration `json:"dependency_timeout,omitempty"`
	// TriggerRule says which outcomes of the upstreams in DependsOn let
	// the task run: TriggerAllSucceeded (the default when empty),
	// TriggerAllEnded or TriggerAnyFailed. Only with DependsOn.
	TriggerRule TriggerRule `json:"trigger_rule,omitempty"`

	// UniqueKey makes the task unique among the tasks of its type
	// submitted with the same key within UniqueWindow of the first one: a
	// later one is created cancelled as a duplicate of the first
	// (Task.DuplicateOf names it) and never runs. At most MaxUniqueKeyLen
	// bytes; empty: not unique.
	UniqueKey string `json:"unique_key,omitempty"`
	// UniqueWindow is how long a UniqueKey holds from its first task's
	// acceptance, 1s … MaxUniqueWindow. Required with UniqueKey.
	UniqueWindow Duration `json:"unique_window,omitempty"`

	// Shardable runs the type's planner as the task's first step; the
	// shards it returns run as child tasks and an optional aggregator runs
	// over their outcomes (see executor.HandleShards).
	Shardable bool `json:"shardable,omitempty"`
	// MaxParallelShards bounds the shards of this task that are released
	// (ready, running or retrying) at once. Zero: no limit.
	MaxParallelShards int `json:"max_parallel_shards,omitempty"`
	// MinShardSuccess is the partial-failure policy. Zero (the default)
	// fails the task as soon as one shard does not succeed (cancelling the
	// rest); a fraction in (0, 1] waits for every shard and aggregates when
	// at least that fraction succeeded.
	MinShardSuccess float64 `json:"min_shard_success,omitempty"`

	// FairnessKey (a tenant, a customer) shares its capability and
	// priority's dispatches fairly with the other keys: while that level's
	// queue is long, ready tasks of different keys are dispatched in turn,
	// weighted by the key limits' weights (KeyLimit.Weight). Empty: not
	// taken in turn. Dot-separated tokens of [A-Za-z0-9_-], like a type.
	FairnessKey string `json:"fairness_key,omitempty"`
	// ConcurrencyKey names what the key limits (KeyLimit) apply to: at
	// most Concurrency tasks with the key dispatched or running at once
	// across the cluster, at most Rate starts per window. Empty, or a key
	// no limit matches: not limited. Same syntax as FairnessKey.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`

	// WaitFor makes an event task: it runs no handler and, when it would
	// become ready, waits for an event on <subject>.<match>, succeeding
	// with its data as its result, or expiring after timeout (see
	// EventWait). Nil: an ordinary task.
	WaitFor *EventWait `json:"wait_for,omitempty"`
	// CancelOn cancels the task, if it has not finished, when an event is
	// published on <subject>.<match> after the task was accepted (see
	// EventCancel). Nil: no event cancels it.
	CancelOn *EventCancel `json:"cancel_on,omitempty"`
}

// PriorityLevel returns the spec's priority with the default applied: 0
// (highest) … MaxPriority.
func (s Spec) PriorityLevel() int {
	if s.Priority == nil {
		return DefaultPriority
	}
	return *s.Priority
}

// RetryLimit returns how many retries follow a failed first attempt, with
// the default applied.
func (s Spec) RetryLimit() int {
	if s.MaxRetries == nil {
		return DefaultMaxRetries
	}
	return *s.MaxRetries
}

// wireSpec mirrors Spec with pointers so absent fields can be told from zero.
type wireSpec struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload"`
	Priority      *int            `json:"priority"`
	Capability    string          `json:"capability"`
	DependsOn     []string        `json:"depends_on"`
	MaxRetries    *int            `json:"max_retries"`
	Timeout       *Duration       `json:"timeout"`
	EstimatedCost *float64        `json:"estimated_cost"`

	Delay             Duration   `json:"delay"`
	RunAt             *time.Time `json:"run_at"`
	Deadline          *time.Time `json:"deadline"`
	TTL               Duration   `json:"ttl"`
	DispatchTimeout   Duration   `json:"dispatch_timeout"`
	MaxDispatches     int        `json:"max_dispatches"`
	DependencyTimeout Duration   `json:"dependency_timeout"`

	Shardable         bool    `json:"shardable"`
	MaxParallelShards int     `json:"max_parallel_shards"`
	MinShardSuccess   float64 `json:"min_shard_success"`

	TriggerRule TriggerRule `json:"trigger_rule"`

	UniqueKey    string   `json:"unique_key"`
	UniqueWindow Duration `json:"unique_window"`

	FairnessKey    string `json:"fairness_key"`
	ConcurrencyKey string `json:"concurrency_key"`

	WaitFor  *EventWait   `json:"wait_for"`
	CancelOn *EventCancel `json:"cancel_on"`
}

// DecodeSpec parses a submitted spec strictly (unknown fields and fields of
// the wrong type are errors, naming the field) and fills the defaults of
// absent fields. An explicit timeout or estimated_cost must be positive (the
// wire contract; leave the field out for its default). It does not
// otherwise validate; call Validate for that.
func DecodeSpec(data []byte) (Spec, error) {
	return decodeSpec(data, true)
}

// decodeSpec is DecodeSpec; fast tries wirejson.DecodeStrict first (the
// tests compare the two ways).
func decodeSpec(data []byte, fast bool) (Spec, error) {
	var w wireSpec
	if fast && wirejson.DecodeStrict(data, &w) {
		return w.checked()
	}
	w = wireSpec{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Spec{}, fmt.Errorf("decode task spec: %w", describeJSONError(data, err, &wireSpec{}))
	}
	if dec.More() {
		return Spec{}, errors.New("decode task spec: trailing data after the JSON object")
	}
	return w.checked()
}

// checked refuses what the wire contract refuses in a decoded spec and
// converts it.
func (w wireSpec) checked() (Spec, error) {
	switch {
	case w.Timeout != nil && *w.Timeout <= 0:
		return Spec{}, &ValidationError{"timeout", "must be positive"}
	case w.EstimatedCost != nil && !(*w.EstimatedCost > 0):
		return Spec{}, &ValidationError{"estimated_cost", fmt.Sprintf("%v must be a positive number", *w.EstimatedCost)}
	}
	return w.spec(), nil
}

// spec converts a decoded wire spec: an absent field gets its default.
func (w wireSpec) spec() Spec {
	s := Spec{ID: w.ID, Type: w.Type, Payload: w.Payload, Priority: w.Priority, Capability: w.Capability,
		DependsOn: w.DependsOn, MaxRetries: w.MaxRetries,
		Delay: w.Delay, RunAt: w.RunAt, Deadline: w.Deadline, TTL: w.TTL,
		DispatchTimeout: w.DispatchTimeout, MaxDispatches: w.MaxDispatches, DependencyTimeout: w.DependencyTimeout,
		Shardable: w.Shardable, MaxParallelShards: w.MaxParallelShards, MinShardSuccess: w.MinShardSuccess,
		TriggerRule: w.TriggerRule, UniqueKey: w.UniqueKey, UniqueWindow: w.UniqueWindow,
		FairnessKey: w.FairnessKey, ConcurrencyKey: w.ConcurrencyKey, WaitFor: w.WaitFor, CancelOn: w.CancelOn}
	s.Timeout = Duration(DefaultTimeout)
	if w.Timeout != nil {
		s.Timeout = *w.Timeout
	}
	s.EstimatedCost = DefaultEstimatedCost
	if w.EstimatedCost != nil {
		s.EstimatedCost = *w.EstimatedCost
	}
	s.Normalize()
	return s
}

// Normalize replaces every unset field by its default, so the spec reads
// the same everywhere (the orchestrator stores specs normalized). It is
// idempotent.
func (s *Spec) Normalize() {
	if s.Priority == nil {
		s.Priority = new(DefaultPriority)
	}
	if s.MaxRetries == nil {
		s.MaxRetries = new(DefaultMaxRetries)
	}
	if s.Capability == "" {
		s.Capability = DefaultCapability
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if s.EstimatedCost == 0 {
		s.EstimatedCost = DefaultEstimatedCost
	}
	if s.DispatchTimeout > 0 && s.MaxDispatches == 0 {
		s.MaxDispatches = DefaultMaxDispatches
	}
}

// describeJSONError names the field a decoding error is about. encoding/json
// names it for a value of the wrong JSON type, but not when a field's own
// UnmarshalText refuses the value (a duration such as "soon"): then each
// member of the object is decoded alone into a fresh into to find it.
func describeJSONError(data []byte, err error, into any) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("field %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return err
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil {
		return err
	}
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		one, merr := json.Marshal(map[string]json.RawMessage{k: members[k]})
		if merr != nil {
			continue
		}
		if json.Unmarshal(one, reflect.New(reflect.TypeOf(into).Elem()).Interface()) != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	return err
}

// ValidID reports whether id can name a task: 1–128 characters of letters,
// digits, '_', '-', '=' and '/', starting with a letter or digit.
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 || !alnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !tokenByte(c) && c != '=' && c != '/' {
			return false
		}
	}
	return true
}

// ValidType reports whether t can name a task type: 1–8 dot-separated
// tokens of 1–64 letters, digits, '_' and '-'.
func ValidType(t string) bool {
	tokens := 0
	for {
		dot := strings.IndexByte(t, '.')
		if dot < 0 {
			return tokens < 8 && ValidCapability(t)
		}
		if tokens++; !ValidCapability(t[:dot]) {
			return false
		}
		t = t[dot+1:]
	}
}

// ValidCapability reports whether c can name a capability (one subject
// token of 1–64 letters, digits, '_' and '-').
func ValidCapability(c string) bool {
	if len(c) == 0 || len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if !tokenByte(c[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func tokenByte(c byte) bool { return alnum(c) || c == '_' || c == '-' }

// ValidationError says why a spec was rejected. Test for it with
// errors.As; its Error is "<field>: <reason>".
type ValidationError struct {
	// Field is the JSON name of the field at fault, such as "priority".
	Field string
	// Reason says what is wrong with its value.
	Reason string
}

// Error returns "<field>: <reason>".
func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

// Validate checks a spec; unset fields count as their defaults (call
// Normalize to fill them in). A rejection is a *ValidationError naming the
// field. maxPayload ≤ 0 means DefaultMaxPayload.
func (s *Spec) Validate(maxPayload int) error {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	switch {
	case s.ID == "":
		return &ValidationError{"id", "is empty"}
	case !ValidID(s.ID):
		return &ValidationError{"id", fmt.Sprintf("%q is not 1-128 of [A-Za-z0-9_-=/] starting with a letter or digit", s.ID)}
	case strings.Contains(s.ID, ShardSeparator):
		return &ValidationError{"id", fmt.Sprintf("%q contains %q, which is reserved for the shards of sharded tasks", s.ID, ShardSeparator)}
	case s.Type == "":
		return &ValidationError{"type", "is empty"}
	case !ValidType(s.Type):
		return &ValidationError{"type", fmt.Sprintf("%q is not dot-separated tokens of [A-Za-z0-9_-]", s.Type)}
	case s.PriorityLevel() < 0 || s.PriorityLevel() > MaxPriority:
		return &ValidationError{"priority", fmt.Sprintf("%d is out of range 0..%d", s.PriorityLevel(), MaxPriority)}
	case s.Capability != "" && !ValidCapability(s.Capability):
		return &ValidationError{"capability", fmt.Sprintf("%q is not one token of [A-Za-z0-9_-]", s.Capability)}
	case s.RetryLimit() < 0 || s.RetryLimit() > MaxRetriesLimit:
		return &ValidationError{"max_retries", fmt.Sprintf("%d is out of range 0..%d", s.RetryLimit(), MaxRetriesLimit)}
	case s.Timeout < 0:
		return &ValidationError{"timeout", "must be positive"}
	case !(s.EstimatedCost >= 0) || s.EstimatedCost > 1e9:
		return &ValidationError{"estimated_cost", fmt.Sprintf("%v must be a positive number", s.EstimatedCost)}
	case len(s.Payload) > maxPayload:
		return &ValidationError{"payload", fmt.Sprintf("%d bytes exceeds the limit of %d", len(s.Payload), maxPayload)}
	case len(s.DependsOn) > MaxDependencies:
		return &ValidationError{"depends_on", fmt.Sprintf("%d dependencies exceed the limit of %d", len(s.DependsOn), MaxDependencies)}
	}
	switch {
	case s.Delay < 0:
		return &ValidationError{"delay", "must not be negative"}
	case s.Delay > 0 && s.RunAt != nil:
		return &ValidationError{"run_at", "give delay or run_at, not both"}
	case s.TTL < 0:
		return &ValidationError{"ttl", "must not be negative"}
	case s.TTL > 0 && s.Deadline != nil:
		return &ValidationError{"deadline", "give deadline or ttl, not both"}
	case s.DispatchTimeout < 0:
		return &ValidationError{"dispatch_timeout", "must not be negative"}
	case s.DependencyTimeout < 0:
		return &ValidationError{"dependency_timeout", "must not be negative"}
	case s.MaxDispatches < 0 || s.MaxDispatches > 100:
		return &ValidationError{"max_dispatches", fmt.Sprintf("%d is out of range 0..100", s.MaxDispatches)}
	case !s.TriggerRule.Valid():
		return &ValidationError{"trigger_rule", fmt.Sprintf("%q is not one of %v", s.TriggerRule, TriggerRules())}
	case s.TriggerRule != "" && s.TriggerRule != TriggerAllSucceeded && len(s.DependsOn) == 0:
		return &ValidationError{"trigger_rule", fmt.Sprintf("%s is only for tasks with depends_on", s.TriggerRule)}
	}
	switch {
	case s.FairnessKey != "" && !ValidKey(s.FairnessKey):
		return &ValidationError{"fairness_key", fmt.Sprintf("%q is not dot-separated tokens of [A-Za-z0-9_-]", s.FairnessKey)}
	case s.ConcurrencyKey != "" && !ValidKey(s.ConcurrencyKey):
		return &ValidationError{"concurrency_key", fmt.Sprintf("%q is not dot-separated tokens of [A-Za-z0-9_-]", s.ConcurrencyKey)}
	}
	if err := s.validateSharding(); err != nil {
		return err
	}
	if err := s.validateUnique(); err != nil {
		return err
	}
	if err := s.validateWaitFor(); err != nil {
		return err
	}
	if err := s.validateCancelOn(); err != nil {
		return err
	}
	if len(s.Payload) > 0 && !json.Valid(s.Payload) {
		return &ValidationError{"payload", "is not valid JSON"}
	}
	seen := make(map[string]bool, len(s.DependsOn))
	for _, d := range s.DependsOn {
		switch {
		case !ValidID(d):
			return &ValidationError{"depends_on", fmt.Sprintf("%q is not a valid task id", d)}
		case d == s.ID:
			return &ValidationError{"depends_on", "a task cannot depend on itself"}
		case seen[d]:
			return &ValidationError{"depends_on", fmt.Sprintf("%q is listed twice", d)}
		}
		seen[d] = true
	}
	return nil
}

// Duration is a time.Duration that travels as a Go duration string ("30s").
type Duration time.Duration

// MarshalText writes the duration as a string such as "1m30s" (a JSON
// string; text marshalling spares encoding/json re-validating the output).
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText reads a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// New returns a spec of a type with its payload marshalled to JSON (a []byte
// or json.RawMessage is used as is) and every default set (priority 2,
// capability "default", 5 retries, 10m timeout, cost 1), as Normalize sets
// them. Set fields on the result to change them. A Spec literal means the
// same defaults for the fields it leaves unset.
func New(taskType string, payload any) (Spec, error) {
	s := Spec{Type: taskType}
	s.Normalize()
	switch p := payload.(type) {
	case nil:
	case json.RawMessage:
		s.Payload = p
	case []byte:
		s.Payload = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return s, fmt.Errorf("encode payload of %s task: %w", taskType, err)
		}
		s.Payload = b
	}
	return s, nil
}

func (s *Spec) validateSharding() error {
	switch {
	case !s.Shardable && s.MaxParallelShards != 0:
		return &ValidationError{"max_parallel_shards", "is only for shardable tasks"}
	case !s.Shardable && s.MinShardSuccess != 0:
		return &ValidationError{"min_shard_success", "is only for shardable tasks"}
	case !s.Shardable:
		return nil
	case len(s.ID) > MaxShardableIDLen:
		return &ValidationError{"id", fmt.Sprintf("a shardable task's id is limited to %d characters so its shard ids fit", MaxShardableIDLen)}
	case s.MaxParallelShards < 0 || s.MaxParallelShards > MaxShards:
		return &ValidationError{"max_parallel_shards", fmt.Sprintf("%d is out of range 0..%d", s.MaxParallelShards, MaxShards)}
	case !(s.MinShardSuccess >= 0 && s.MinShardSuccess <= 1):
		return &ValidationError{"min_shard_success", fmt.Sprintf("%v is not a fraction in 0..1", s.MinShardSuccess)}
	}
	return nil
}

func (s *Spec) validateUnique() error {
	switch {
	case s.UniqueKey == "" && s.UniqueWindow != 0:
		return &ValidationError{"unique_window", "is only for tasks with a unique_key"}
	case s.UniqueKey == "":
		return nil
	case len(s.UniqueKey) > MaxUniqueKeyLen:
		return &ValidationError{"unique_key", fmt.Sprintf("%d bytes exceed the limit of %d", len(s.UniqueKey), MaxUniqueKeyLen)}
	case !utf8.ValidString(s.UniqueKey):
		return &ValidationError{"unique_key", "is not valid UTF-8"}
	case s.UniqueWindow == 0:
		return &ValidationError{"unique_window", "is required with unique_key"}
	case s.UniqueWindow.Std() < MinUniqueWindow || s.UniqueWindow.Std() > MaxUniqueWindow:
		return &ValidationError{"unique_window", fmt.Sprintf("%s is out of range %s..%s", s.UniqueWindow.Std(), MinUniqueWindow, MaxUniqueWindow)}
	}
	return nil
}
