package task

import "fmt"

// TriggerRule says which outcomes of its upstreams (depends_on) let a
// dependent run. The zero value means TriggerAllSucceeded.
type TriggerRule string

// The trigger rules. An upstream has "ended" once it is succeeded, failed,
// cancelled or expired; it "did not succeed" when it ended in any of the
// last three.
const (
	// TriggerAllSucceeded (the default) runs the dependent once every
	// upstream succeeded and cancels it as soon as one did not succeed
	// (reason "upstream <id> is <state>").
	TriggerAllSucceeded TriggerRule = "all_succeeded"
	// TriggerAllEnded runs the dependent once every upstream ended,
	// whatever the outcomes: a cleanup step. It is never cancelled because
	// of an upstream.
	TriggerAllEnded TriggerRule = "all_ended"
	// TriggerAnyFailed runs the dependent as soon as one upstream did not
	// succeed (failed, cancelled or expired), without waiting for the
	// others: a compensation step. When every upstream succeeded it is
	// cancelled with the reason "trigger rule any_failed: no upstream
	// failed".
	TriggerAnyFailed TriggerRule = "any_failed"
)

// TriggerRules returns every trigger rule, the default first.
func TriggerRules() []TriggerRule {
	return []TriggerRule{TriggerAllSucceeded, TriggerAllEnded, TriggerAnyFailed}
}

// Valid reports whether r is one of the trigger rules or empty (the default).
func (r TriggerRule) Valid() bool {
	switch r {
	case "", TriggerAllSucceeded, TriggerAllEnded, TriggerAnyFailed:
		return true
	}
	return false
}

// Trigger returns the spec's trigger rule with the default applied.
func (s Spec) Trigger() TriggerRule {
	if s.TriggerRule == "" {
		return TriggerAllSucceeded
	}
	return s.TriggerRule
}

// Verdict is what a dependent's trigger rule makes of its upstreams.
type Verdict int

// The verdicts of a trigger rule.
const (
	// VerdictWait: the upstream has not ended (or, for the whole set,
	// some has not): the dependent keeps waiting.
	VerdictWait Verdict = iota
	// VerdictCount: the upstream ended in a way the rule counts towards
	// "all" (succeeded for all_succeeded and any_failed, any end for
	// all_ended); it decides nothing on its own.
	VerdictCount
	// VerdictRun: the dependent runs now.
	VerdictRun
	// VerdictCancel: the dependent is cancelled now.
	VerdictCancel
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictWait:
		return "wait"
	case VerdictCount:
		return "count"
	case VerdictRun:
		return "run"
	case VerdictCancel:
		return "cancel"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Upstream judges one upstream in state s under the rule: VerdictWait
// until it ended, then VerdictCount, or VerdictRun / VerdictCancel when
// that one end decides the dependent whatever the other upstreams do.
func (r TriggerRule) Upstream(s State) Verdict {
	if !s.Terminal() {
		return VerdictWait
	}
	switch r {
	case TriggerAllEnded:
		return VerdictCount
	case TriggerAnyFailed:
		if s == Succeeded {
			return VerdictCount
		}
		return VerdictRun
	default:
		if s == Succeeded {
			return VerdictCount
		}
		return VerdictCancel
	}
}

// AllCounted is the rule's verdict once every upstream was counted (none
// decided alone): VerdictRun, except VerdictCancel for TriggerAnyFailed
// (every upstream succeeded).
func (r TriggerRule) AllCounted() Verdict {
	if r == TriggerAnyFailed {
		return VerdictCancel
	}
	return VerdictRun
}
