package console_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// The dead-letter page shows how many attempts a task ran (the last
// attempt's number), not how many failures its record kept (at most 5).
func TestConsoleDLQShowsTheAttemptNumber(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: orchestrator.RetryPolicy{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{})
	ex.HandleFunc("console.fails", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("always") })
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, time.Minute)
	s, err := console.New(console.Config{Client: c, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	f := &fixture{t: t, c: c, url: hs.URL}
	id, err := c.Submit(ctx, task.Spec{ID: "seven-attempts", Type: "console.fails", MaxRetries: new(6)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Wait(ctx, id); err != nil || got.State != task.Failed {
		t.Fatalf("%+v, %v", got, err)
	}
	b := f.browser()
	row := regexp.MustCompile(`seven-attempts</a></td><td>console.fails</td>\s*<td>[^<]*</td><td>(\d+)</td>`)
	testenv.Eventually(t, 30*time.Second, "the dead letter listed", func() bool {
		_, body := b.get("/dlq")
		return row.MatchString(body)
	})
	_, body := b.get("/dlq")
	if got := row.FindStringSubmatch(body)[1]; got != "7" {
		t.Fatalf("the dead-letter page shows %s attempts for a task that ran 7", got)
	}
}
