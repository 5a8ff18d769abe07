package queue

import "testing"

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"q.a", "q.a", true},
		{"q.a", "q.b", false},
		{"q.a", "q.*", true},
		{"q.*", "q.>", true},
		{"q.>", "q", false},
		{"q.a.b", "q.>", true},
		{"q.a.b", "q.*", false},
		{">", "task.ready.x.p0", true},
		{"task.submit.>", "task.graph.submit", false},
		{"task.submit.>", "task.submit-p0.>", false},
		{"task.*.x", "task.submit.*", true},
	} {
		if got := overlap(c.a, c.b); got != c.want {
			t.Errorf("overlap(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := overlap(c.b, c.a); got != c.want {
			t.Errorf("overlap(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}
