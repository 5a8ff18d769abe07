package executor_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

// A long handler reports its progress; while it runs, its executor's
// announcement in the workers registry says where it runs, since when and
// how far it is (`ax status ID`, `ax workers`, the console show it live).
func ExampleJob_Progress() {
	env, stop := startEnv()
	defer stop()
	ctx := context.Background()

	reported, release := make(chan struct{}), make(chan struct{})
	env.Executor.HandleFunc("video.encode", func(ctx context.Context, j *executor.Job) (any, error) {
		for part := 1; part <= 4; part++ {
			j.Progress(ctx, float64(part)*25, fmt.Sprintf("encoding part %d of 4", part))
		}
		close(reported)
		<-release
		return nil, nil
	})
	id, _ := env.Client.Submit(ctx, task.Spec{Type: "video.encode"})
	<-reported
	for {
		w, x, err := env.Client.RunningOn(ctx, id)
		if err == nil && x != nil && x.Progress != nil && x.Progress.Percent == 100 {
			fmt.Printf("running on its executor: %v, %.0f%% %s\n", w.ID == env.Executor.ID(), x.Progress.Percent, x.Progress.Message)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	t, _ := env.Client.Wait(ctx, id)
	fmt.Println(t.State)
	// Output:
	// running on its executor: true, 100% encoding part 4 of 4
	// succeeded
}
