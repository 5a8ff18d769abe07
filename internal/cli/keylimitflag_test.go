package cli

import (
	"testing"
	"time"

	"github.com/ax-run/ax/task"
)

func TestParseKeyLimit(t *testing.T) {
	l, err := parseKeyLimit("customer.*:concurrency=5,rate=100/2s,adaptive,min=2,target-latency=300ms,weight=3")
	want := task.KeyLimit{Key: "customer.*", Concurrency: 5, Rate: 100, Per: task.Duration(2 * time.Second), Adaptive: true,
		MinConcurrency: 2, TargetLatency: task.Duration(300 * time.Millisecond), Weight: 3}
	if err != nil || l != want {
		t.Fatalf("got %+v %v, want %+v", l, err, want)
	}
	for _, bad := range []string{"customer.*", "customer.*:", "x:concurrency=-1", "x:speed=3", "a..b:weight=1", "x:adaptive", "x:rate=5/fast"} {
		if _, err := parseKeyLimit(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
