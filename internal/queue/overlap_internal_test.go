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

func TestFloors(t *testing.T) {
	got := floors([]consumerView{
		{name: "A", filters: []string{"q.a"}, ackFloor: 6, ax: true},
		{name: "A2", filters: []string{"q.a"}, ackFloor: 8, ax: true},
		{name: "B", filters: []string{"q.b"}, ackFloor: 2, ax: true},
		{name: "C", filters: []string{"q.c"}, ackFloor: 9, ax: true},
		{name: "W", filters: []string{"q.*"}, ackFloor: 4, ax: true},
		{name: "R", filters: []string{"r.x"}, ackFloor: 1, ax: true},
		{name: "F", filters: []string{"f.x"}, ackFloor: 7}, // foreign, alone: never trimmed
	})
	want := map[string]uint64{"q.a": 4, "q.b": 2, "q.c": 4, "q.*": 2, "r.x": 1}
	if len(got) != len(want) {
		t.Fatalf("floors %v, want %v", got, want)
	}
	for f, w := range want {
		if got[f] != w {
			t.Errorf("floor of %s = %d, want %d (all %v)", f, got[f], w, got)
		}
	}
	// A consumer without filters reads everything: it holds back every filter.
	all := floors([]consumerView{{name: "A", filters: []string{"q.a"}, ackFloor: 6, ax: true}, {name: "ALL", ackFloor: 3, ax: true}})
	if all["q.a"] != 3 || all[">"] != 3 {
		t.Fatalf("floors with a reader of everything: %v", all)
	}
}

func TestWildcard(t *testing.T) {
	for s, want := range map[string]bool{">": true, "*": true, "q.>": true, "q.*": true, "*.a": true, "q.*.b": true,
		"q.a": false, "task.ready.x.p0": false, "task.submit-p2.>": true} {
		if wildcard(s) != want {
			t.Errorf("wildcard(%q) = %v", s, !want)
		}
	}
}
