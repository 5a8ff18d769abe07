package task

import "testing"

// TestTriggerRuleVerdicts: what each rule makes of one upstream in every
// state, and of a set in which every upstream was counted.
func TestTriggerRuleVerdicts(t *testing.T) {
	want := map[TriggerRule]map[State]Verdict{
		"":                  {Succeeded: VerdictCount, Failed: VerdictCancel, Cancelled: VerdictCancel, Expired: VerdictCancel},
		TriggerAllSucceeded: {Succeeded: VerdictCount, Failed: VerdictCancel, Cancelled: VerdictCancel, Expired: VerdictCancel},
		TriggerAllEnded:     {Succeeded: VerdictCount, Failed: VerdictCount, Cancelled: VerdictCount, Expired: VerdictCount},
		TriggerAnyFailed:    {Succeeded: VerdictCount, Failed: VerdictRun, Cancelled: VerdictRun, Expired: VerdictRun},
	}
	for rule, byState := range want {
		for _, s := range States() {
			w, ok := byState[s]
			if !ok {
				w = VerdictWait // not ended
			}
			if got := rule.Upstream(s); got != w {
				t.Errorf("rule %q, upstream %s: got %s, want %s", rule, s, got, w)
			}
		}
		all := VerdictRun
		if rule == TriggerAnyFailed {
			all = VerdictCancel
		}
		if got := rule.AllCounted(); got != all {
			t.Errorf("rule %q, all counted: got %s, want %s", rule, got, all)
		}
		if !rule.Valid() {
			t.Errorf("rule %q not valid", rule)
		}
	}
	if TriggerRule("one_failed").Valid() {
		t.Error("an unknown rule is valid")
	}
	if (Spec{}).Trigger() != TriggerAllSucceeded || (Spec{TriggerRule: TriggerAllEnded}).Trigger() != TriggerAllEnded {
		t.Error("Trigger does not apply the default")
	}
}
