package subject

import "testing"

func TestReadyParts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		cap  string
		prio int
		ok   bool
	}{
		{Ready("gpu-big", 3), "gpu-big", 3, true},
		{Ready("default", 0), "default", 0, true},
		{"task.ready..p1", "", 0, false},
		{"task.ready.gpu.p9", "", 0, false},
	} {
		c, p, ok := ReadyParts(tc.in)
		if ok != tc.ok || ok && (c != tc.cap || p != tc.prio) {
			t.Errorf("ReadyParts(%q) = %q %d %v", tc.in, c, p, ok)
		}
	}
	for _, tc := range []struct {
		in   string
		cap  string
		prio int
		ok   bool
	}{
		{ReadyConsumer("gpu-big", 3), "gpu-big", 3, true},
		{ReadyConsumer("a", 5), "a", 5, true},
		{"ax-ready--p1", "", 0, false},
		{"ax-ready-gpu-p6", "", 0, false},
		{"ax-orchestrator-submit", "", 0, false},
		{"ax-ready-gpu-p01", "", 0, false},
	} {
		c, p, ok := ParseReadyConsumer(tc.in)
		if ok != tc.ok || ok && (c != tc.cap || p != tc.prio) {
			t.Errorf("ParseReadyConsumer(%q) = %q %d %v", tc.in, c, p, ok)
		}
	}
}
