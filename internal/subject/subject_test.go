package subject

import "testing"

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
