package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// MaxLimitKeys bounds the concurrency keys Limits reads from AX_SLOTS: the
// first 1,000 the bucket lists; keys beyond are left out.
const MaxLimitKeys = 1000

// LimitStatus is one key limit in force — set at run time (SetLimit, ax
// limits set) or from the orchestrators' configuration — and the
// concurrency keys it governs.
type LimitStatus struct {
	// Limit is the limit as stored, with who set it, when and why (for a
	// configured one: the orchestrator that last published the
	// configuration). Its Key is empty for the entry that gathers the keys
	// in use that no limit matches (a limit removed while its keys' tasks
	// still hold slots).
	Limit task.KeyLimit `json:"limit"`
	// Configured is true for a limit of the orchestrators' configuration
	// (orchestrator.Config.KeyLimits, ax orchestrator --key-limit) that no
	// run-time limit of the same pattern replaces.
	Configured bool `json:"configured,omitempty"`
	// Keys are the concurrency keys with a record in AX_SLOTS that the
	// limit governs (by task.MatchLimit among the run-time limits), sorted.
	Keys []KeyUsage `json:"keys"`
}

// KeyUsage is one concurrency key's slots.
type KeyUsage struct {
	// Key is the concurrency key (a task's ConcurrencyKey).
	Key string `json:"key"`
	// InUse is how many tasks hold a slot: dispatched or running.
	InUse int `json:"in_use"`
	// Limit is the slots the key has now: an adaptive limit's current
	// value (its integer part), else the limit's Concurrency (0 when the
	// limit is unknown to the client: a limit from the orchestrators'
	// configuration that is not adaptive).
	Limit int `json:"limit"`
	// Adaptive is an adaptive limit's current value (0: not adaptive).
	Adaptive float64 `json:"adaptive,omitempty"`
	// Lowered is when an adaptive limit was last lowered.
	Lowered time.Time `json:"lowered,omitzero"`
}

// Full reports whether every slot is taken (a task of the key waits for
// one to free). A key whose limit is unknown is never full.
func (u KeyUsage) Full() bool { return u.Limit > 0 && u.InUse >= u.Limit }

// SetLimit sets (or replaces) the run-time limit of l.Key, a key pattern
// (task.KeyLimit): the orchestrators store it, stamped with who set it,
// when and reason, record an audit event (kind "limit") and apply it to
// the tasks of the matching keys from then on. It replaces a limit of the
// same pattern from the orchestrators' configuration. l is validated
// first; a refusal is a *task.ValidationError.
func (c *Client) SetLimit(ctx context.Context, l task.KeyLimit, reason string) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("invalid limit: %w", err)
	}
	// Who and when are the orchestrator's to say.
	l.Reason, l.By, l.At = reason, "", time.Time{}
	return c.limitCommand(ctx, subject.CommandLimitSet, l.Key, task.CommandRequest{Reason: reason, Limit: &l})
}

// DeleteLimit removes the run-time limit of a key pattern; a limit of the
// same pattern from the orchestrators' configuration applies again.
func (c *Client) DeleteLimit(ctx context.Context, pattern, reason string) error {
	if !task.ValidKeyPattern(pattern) {
		return fmt.Errorf("%s: %w key pattern %q", subject.CommandLimitDelete, ErrInvalid, pattern)
	}
	return c.limitCommand(ctx, subject.CommandLimitDelete, pattern, task.CommandRequest{Reason: reason})
}

// limitCommand sends a limit command, whose id is the pattern's LimitID,
// and waits for the orchestrator's reply.
func (c *Client) limitCommand(ctx context.Context, kind, pattern string, req task.CommandRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s %s: encode: %w", kind, pattern, err)
	}
	rep, err := c.send(ctx, kind, subject.LimitID(pattern), body)
	if err != nil {
		return fmt.Errorf("limit %s: %w", pattern, err)
	}
	if !rep.OK {
		return refused(kind, pattern, rep)
	}
	return nil
}

// Limits lists the key limits in force (AX_CONTROL): those set at run
// time and those of the orchestrators' configuration that none of the
// same pattern replaces (Configured), sorted by pattern, each with the
// concurrency keys in use that it governs (AX_SLOTS, at most MaxLimitKeys
// keys). Keys no limit matches come last, under an entry with an empty
// Limit.Key (see LimitStatus).
func (c *Client) Limits(ctx context.Context) ([]LimitStatus, error) {
	limits, err := c.runtimeLimits(ctx)
	if err != nil {
		return nil, err
	}
	conf, err := c.configuredLimits(ctx)
	if err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(limits))
	for _, l := range limits {
		set[l.Key] = true
	}
	isConf := map[string]bool{}
	for _, l := range conf.Limits {
		if !set[l.Key] {
			l.By, l.At = conf.By, conf.At
			if l.Reason == "" {
				l.Reason = "the orchestrators' configuration"
			}
			limits = append(limits, l)
			set[l.Key], isConf[l.Key] = true, true
		}
	}
	usage, err := c.keyUsage(ctx)
	if err != nil {
		return nil, err
	}
	out := groupUsage(limits, usage)
	for i := range out {
		out[i].Configured = isConf[out[i].Limit.Key]
	}
	return out, nil
}

// configuredLimits reads the limits of the orchestrators' configuration
// (none before an orchestrator of this version started).
func (c *Client) configuredLimits(ctx context.Context) (task.ConfiguredLimits, error) {
	var conf task.ConfiguredLimits
	kv, err := c.js.KeyValue(ctx, subject.BucketControl)
	if err != nil {
		return conf, fmt.Errorf("bind %s: %w", subject.BucketControl, err)
	}
	e, err := kv.Get(ctx, subject.ControlConfiguredLimits)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return conf, nil
	case err != nil:
		return conf, fmt.Errorf("read the configured limits: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &conf); err != nil {
		return conf, fmt.Errorf("the configured limits hold %q: %w", e.Value(), err)
	}
	return conf, nil
}

// runtimeLimits reads the limit.<id> keys of AX_CONTROL.
func (c *Client) runtimeLimits(ctx context.Context) ([]task.KeyLimit, error) {
	kv, err := c.js.KeyValue(ctx, subject.BucketControl)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.BucketControl, err)
	}
	var out []task.KeyLimit
	// ControlLimit("") is the keys' prefix, "limit.".
	err = latest(ctx, kv, subject.ControlLimit("")+">", 0, func(e jetstream.KeyValueEntry) {
		kind, pattern, ok := subject.ParseControlKey(e.Key())
		var l task.KeyLimit
		if ok && kind == "limit" && json.Unmarshal(e.Value(), &l) == nil {
			l.Key = pattern // the key says which pattern; the value may predate it
			out = append(out, l)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read limits: %w", err)
	}
	return out, nil
}

// keyUsage reads up to MaxLimitKeys records of AX_SLOTS. A deployment
// whose topology predates the bucket has none.
func (c *Client) keyUsage(ctx context.Context) (map[string]task.Slots, error) {
	out := map[string]task.Slots{}
	kv, err := c.js.KeyValue(ctx, subject.BucketSlots)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.BucketSlots, err)
	}
	err = latest(ctx, kv, ">", MaxLimitKeys, func(e jetstream.KeyValueEntry) {
		var s task.Slots
		if json.Unmarshal(e.Value(), &s) == nil {
			out[e.Key()] = s
		}
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject.BucketSlots, err)
	}
	return out, nil
}

// latest hands fn the current value of every key of kv matching filter, up
// to most of them (0: all), through one short-lived watcher.
func latest(ctx context.Context, kv jetstream.KeyValue, filter string, most int, fn func(jetstream.KeyValueEntry)) error {
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for n := 0; most == 0 || n < most; n++ {
		select {
		case e := <-w.Updates():
			if e == nil { // every current value was delivered
				return nil
			}
			fn(e)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// groupUsage assigns each key to the most specific run-time limit setting
// a concurrency that matches it.
func groupUsage(limits []task.KeyLimit, usage map[string]task.Slots) []LimitStatus {
	sort.Slice(limits, func(i, j int) bool { return limits[i].Key < limits[j].Key })
	out := make([]LimitStatus, len(limits))
	at := make(map[string]int, len(limits))
	for i, l := range limits {
		out[i] = LimitStatus{Limit: l, Keys: []KeyUsage{}}
		at[l.Key] = i
	}
	var other []KeyUsage
	for key, s := range usage {
		u := KeyUsage{Key: key, InUse: len(s.Holders), Adaptive: s.Limit, Lowered: s.Lowered}
		if s.Limit > 0 {
			u.Limit = int(s.Limit)
		}
		l, ok := task.MatchLimit(limits, key, "concurrency")
		if !ok {
			other = append(other, u)
			continue
		}
		if u.Limit == 0 {
			u.Limit = l.Concurrency
		}
		i := at[l.Key]
		out[i].Keys = append(out[i].Keys, u)
	}
	if len(other) > 0 {
		out = append(out, LimitStatus{Keys: other})
	}
	for _, ls := range out {
		sort.Slice(ls.Keys, func(i, j int) bool { return ls.Keys[i].Key < ls.Keys[j].Key })
	}
	return out
}
