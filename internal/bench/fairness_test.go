package bench

import (
	"context"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
)

// TestFairnessSmall runs the fairness scenario at a small size and checks
// its structure only: both runs ran every task and measured B. The
// figures themselves depend on the machine and are not asserted.
func TestFairnessSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Fairness(ctx, FairnessConfig{ATasks: 3000, BTasks: 20, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []FairnessRun{res.With, res.Without} {
		if run.ATasks != 3000 || run.BTasks != 20 || run.ASucceeded != 3000 || run.BSucceeded != 20 || run.Failed != 0 {
			t.Errorf("fair=%v: %+v, want every task of A and B succeeded", run.Fair, run)
		}
		if run.ATasksPerSec <= 0 || run.BSubmitToStart.Max <= 0 || run.BSubmitToStart.P50 > run.BSubmitToStart.P99 || run.BAllDone <= 0 {
			t.Errorf("fair=%v: figures missing: %+v", run.Fair, run)
		}
		t.Logf("fair=%v (window %d): A %.0f tasks/s; A's backlog at B's submission %d; B submit→start p50 %s p99 %s",
			run.Fair, run.Window, run.ATasksPerSec, run.ABacklog, run.BSubmitToStart.P50, run.BSubmitToStart.P99)
	}
	if !res.With.Fair || res.With.Window <= 0 || res.Without.Fair || res.Without.Window != -1 {
		t.Errorf("modes: with %+v, without %+v", res.With, res.Without)
	}
}
