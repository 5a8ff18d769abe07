package sdk_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func ExampleSubmitter() {
	url, stop := startAX()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := sdk.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	s, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{
		FlushInterval: 10 * time.Millisecond, // default 1s; BatchSize (500) flushes sooner
		OnError: func(spec task.Spec, err error) {
			log.Printf("task %s not submitted: %v", spec.ID, err) // e.g. keep it for a retry
		},
	})
	if err != nil {
		panic(err)
	}
	for i := range 3 {
		spec, _ := task.New("email.send", map[string]int{"issue": i})
		spec.ID = fmt.Sprintf("newsletter-%d", i)
		if _, err := s.Submit(ctx, spec); err != nil { // buffered: returns in microseconds
			panic(err)
		}
	}
	if err := s.Close(ctx); err != nil { // every task acknowledged (durable) or reported
		panic(err)
	}
	t, _ := c.Wait(ctx, "newsletter-2")
	fmt.Println(s.Stats().Acknowledged, t.State)
	// Output: 3 succeeded
}
