package bench

import (
	"context"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
)

// TestAdaptiveSmall runs the adaptive scenario at a small size and checks
// its structure only: every task succeeded in both runs and the curve was
// sampled. The figures themselves depend on the machine.
func TestAdaptiveSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Adaptive(ctx, AdaptiveConfig{Tasks: 300, Sample: 50 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(DefaultDownstreamCapacity) / DefaultDownstreamCall.Seconds(); res.Ideal != want || res.Concurrency != DefaultAdaptiveConcurrency {
		t.Errorf("result %+v", res)
	}
	for _, run := range []AdaptiveRun{res.Adaptive, res.Fixed} {
		if run.Tasks != 300 || run.Succeeded != 300 || run.Failed != 0 {
			t.Errorf("adaptive=%v: %d of %d succeeded, %d failed", run.Adaptive, run.Succeeded, run.Tasks, run.Failed)
		}
		if len(run.Samples) == 0 || run.TasksPerSec <= 0 || run.LimitMedian <= 0 {
			t.Errorf("adaptive=%v: nothing measured: %+v", run.Adaptive, run)
		}
		for _, s := range run.Samples {
			if s.Limit < 1 || s.Limit > DefaultAdaptiveConcurrency || s.InUse < 0 || s.InUse > DefaultAdaptiveConcurrency {
				t.Errorf("adaptive=%v: sample %+v out of range", run.Adaptive, s)
			}
		}
		t.Logf("adaptive=%v: %.0f tasks/s, %d samples, limit median %.1f, %.2f 429s per task, downstream peak %d",
			run.Adaptive, run.TasksPerSec, len(run.Samples), run.LimitMedian, run.RejectedPerTask, run.DownstreamPeak)
	}
	if !res.Adaptive.Adaptive || res.Fixed.Adaptive || res.Fixed.LimitMedian != DefaultAdaptiveConcurrency {
		t.Errorf("modes: adaptive %+v, fixed %+v", res.Adaptive.Adaptive, res.Fixed.Adaptive)
	}
}
