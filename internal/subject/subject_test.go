package subject

import (
	"slices"
	"strings"
	"testing"
)

func TestStateSubjects(t *testing.T) {
	if got := State("a-1", "email.send"); got != "ax.state.a-1.email.send" {
		t.Fatalf("State = %q", got)
	}
	for subj, want := range map[string][2]string{
		"ax.state.a-1.email.send": {"a-1", "email.send"},
		"ax.state.a.b":            {"a", "b"},
	} {
		id, typ, ok := ParseState(subj)
		if !ok || id != want[0] || typ != want[1] {
			t.Errorf("ParseState(%q) = %q, %q, %v", subj, id, typ, ok)
		}
	}
	for _, subj := range []string{"ax.state.a", "ax.state..b", "ax.state.a.", "ax.claim.a.b", "ax.state"} {
		if _, _, ok := ParseState(subj); ok {
			t.Errorf("ParseState(%q) accepted", subj)
		}
	}
	if got := StatePattern("email.>"); got != "ax.state.*.email.>" {
		t.Fatalf("StatePattern = %q", got)
	}
}

func TestDirectTo(t *testing.T) {
	for _, node := range []string{"orchestrator-host-42", "a.b", "with space", strings.Repeat("x", 65), "", "ünï"} {
		tok := NodeToken(node)
		if tok == "" || strings.ContainsAny(tok, ".*> \t") || len(tok) > 64 || tok != NodeToken(node) {
			t.Errorf("NodeToken(%q) = %q: not one stable subject token", node, tok)
		}
		for _, d := range []string{Direct(Completed("email.send")), DirectBatch(Completed("email.send"))} {
			to := DirectTo(tok, d)
			if back, ok := DirectFromDirectTo(to); !ok || back != d {
				t.Errorf("DirectFromDirectTo(%q) = %q, %v; want %q", to, back, ok, d)
			}
			// DirectAll is ax.direct.>, DirectToNode ax.direct-to.<node>.>.
			if strings.HasPrefix(to, "ax.direct.") || !strings.HasPrefix(to, strings.TrimSuffix(DirectToNode(tok), ">")) ||
				DirectToAll != "ax.direct-to.>" || DirectToNode(tok) != "ax.direct-to."+tok+".>" {
				t.Errorf("%q: must match %s and %s, not %s", to, DirectToNode(tok), DirectToAll, DirectAll)
			}
		}
	}
	if NodeToken("orchestrator-host-42") != "orchestrator-host-42" || NodeToken("a.b") == NodeToken("a_b") {
		t.Error("plain ids are their own token; others hash")
	}
	if _, ok := DirectFromDirectTo(Direct(Completed("t"))); ok {
		t.Error("a shared direct subject is not addressed")
	}
}

func TestOwnedSweeps(t *testing.T) {
	subj := Timer(TimerSweep, OwnedSweep("INST1", "B2"))
	if owner, ok := OwnerOfSweep(subj); !ok || owner != "INST1" {
		t.Errorf("OwnerOfSweep(%q) = %q, %v", subj, owner, ok)
	}
	for _, s := range []string{
		Timer(TimerSweep, "B2"),         // a sweep of dispatched tasks
		Timer(TimerWatch, "INST1.B2"),   // another kind
		Fire(TimerSweep, "INST1.B2"),    // the fired copy
		Timer(TimerSweep, "INST1.B2.x"), // three tokens
		"ax.timer.sweep..B2", "ax.timer.sweep.INST1.",
	} {
		if owner, ok := OwnerOfSweep(s); ok {
			t.Errorf("OwnerOfSweep(%q) = %q, want none", s, owner)
		}
	}
}

// TestFireFiltersSplitTheKinds: every timer kind is consumed by exactly one
// of the two orchestrator consumers of AX_TIMERS (a work queue, whose
// consumers' filters must not overlap), and the looks are the background
// kinds.
func TestFireFiltersSplitTheKinds(t *testing.T) {
	looks, timers := FireFilters(true), FireFilters(false)
	seen := map[string]int{}
	for _, f := range append(append([]string(nil), looks...), timers...) {
		seen[f]++
	}
	for _, k := range TimerKinds {
		f := Fire(k, ">")
		if seen[f] != 1 {
			t.Errorf("kind %s: filter %s appears %d times, want once", k, f, seen[f])
		}
		delete(seen, f)
	}
	if len(seen) > 0 {
		t.Errorf("filters of no kind: %v", seen)
	}
	want := map[TimerKind]bool{TimerWatch: true, TimerSweep: true, TimerForget: true}
	for _, k := range TimerKinds {
		if k.Look() != want[k] {
			t.Errorf("%s.Look() = %v, want %v", k, k.Look(), want[k])
		}
	}
	if !slices.Contains(timers, Fire(TimerRetry, ">")) || !slices.Contains(timers, Fire(TimerEffects, ">")) {
		t.Errorf("retries and effects must not wait behind looks: timers consumer filters %v", timers)
	}
}
