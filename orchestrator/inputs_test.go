package orchestrator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// part is an upstream's result: a number, padded to make it large.
type part struct {
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
}

// TestResultsFlowDownTheDAG: a task sums the results of its two
// upstreams, one inline and one larger than task.InlineResultLimit (read
// from the object store of its capability, checked against its digest); a
// cleanup step after a failure sees how each upstream ended; the SDK shows
// the same inputs.
func TestResultsFlowDownTheDAG(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{Retry: fastRetry})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Capabilities: []string{task.DefaultCapability, "big"}})
	big := strings.Repeat("x", task.InlineResultLimit+1000)
	ex.HandleFunc("large", func(context.Context, *executor.Job) (any, error) { return part{N: 30, Pad: big}, nil })
	ex.HandleFunc("small", func(context.Context, *executor.Job) (any, error) { return part{N: 12}, nil })
	ex.HandleFunc("bad", func(context.Context, *executor.Job) (any, error) { return nil, errors.New("boom") })
	ex.HandleFunc("sum", func(ctx context.Context, j *executor.Job) (any, error) {
		total := 0
		for _, id := range j.DependsOn {
			var p part
			if err := j.UpstreamResult(ctx, id, &p); err != nil {
				return nil, executor.Permanent(err)
			}
			total += p.N
		}
		// Asking for a task that is not an upstream is an error.
		if err := j.UpstreamResult(ctx, "elsewhere", nil); !errors.Is(err, executor.ErrNotUpstream) {
			return nil, executor.Permanent(errors.New("an id outside depends_on was readable"))
		}
		return total, nil
	})
	ex.HandleFunc("report", func(ctx context.Context, j *executor.Job) (any, error) {
		ins, err := j.Inputs(ctx)
		if err != nil {
			return nil, executor.Permanent(err)
		}
		var lines []string
		for _, in := range ins {
			line := in.ID + " " + string(in.State)
			if in.State == task.Failed && strings.Contains(in.Reason, "boom") {
				line += ": boom"
			}
			lines = append(lines, line)
		}
		// A failed upstream has no result to read.
		if err := j.UpstreamResult(ctx, "broken", nil); !errors.Is(err, executor.ErrUpstreamNotSucceeded) {
			return nil, executor.Permanent(errors.New("a failed upstream's result was readable"))
		}
		return lines, nil
	})
	testenv.Start(t, ex)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 90*time.Second)
	broken := newSpec("broken", "bad")
	broken.MaxRetries = new(0)
	report := newSpec("report", "report", "small", "broken")
	report.TriggerRule = task.TriggerAllEnded
	large := newSpec("large", "large")
	large.Capability = "big" // the reader, sum, is of another capability
	if _, err := c.SubmitGraph(ctx, []task.Spec{large, newSpec("small", "small"),
		newSpec("sum", "sum", "large", "small"), broken, report}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(ctx, "sum")
	if err != nil || got.State != task.Succeeded || string(got.Result) != "42" {
		t.Fatalf("sum: %s %q result %s, %v; want succeeded with 42", got.State, got.Reason, got.Result, err)
	}
	got, err = c.Wait(ctx, "report")
	want := `["small succeeded","broken failed: boom"]`
	if err != nil || got.State != task.Succeeded || string(got.Result) != want {
		t.Fatalf("report: %s %q result %s, %v; want %s", got.State, got.Reason, got.Result, err, want)
	}
	ins, err := c.Inputs(ctx, "sum")
	if err != nil || len(ins) != 2 {
		t.Fatalf("inputs of sum: %+v, %v", ins, err)
	}
	if ins[0].ID != "large" || ins[0].ResultObject == "" || len(ins[0].Result) != 0 {
		t.Errorf("the large input is not a reference into the object store: %+v", ins[0])
	}
	// In the store of its capability, with the digest of its bytes; not in
	// the legacy AX_OBJECTS.
	if ins[0].ResultBucket != subject.ObjectBucket("big") || !object.ValidDigest(ins[0].ResultDigest) {
		t.Errorf("the large input's store and digest: %q %q", ins[0].ResultBucket, ins[0].ResultDigest)
	}
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	obs, err := js.ObjectStore(ctx, subject.ObjectBucket("big"))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := obs.GetBytes(ctx, ins[0].ResultObject); err != nil || object.Digest(data) != ins[0].ResultDigest {
		t.Fatalf("the object in %s: %d bytes, %v; want the digest recorded", subject.ObjectBucket("big"), len(data), err)
	}
	legacy, err := js.ObjectStore(ctx, subject.BucketObjects)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.GetInfo(ctx, ins[0].ResultObject); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the object in AX_OBJECTS: %v; want not found", err)
	}
	if ins[1].ID != "small" || string(ins[1].Result) != `{"n":12}` || ins[1].ResultObject != "" {
		t.Errorf("the small input is not inline: %+v", ins[1])
	}
	raw, err := c.Result(ctx, ins[0].ID)
	if err != nil || !strings.Contains(string(raw), big) {
		t.Fatalf("the large result through the SDK: %d bytes, %v", len(raw), err)
	}
	if none, err := c.Inputs(ctx, "small"); err != nil || len(none) != 0 {
		t.Fatalf("inputs of a task without depends_on: %+v, %v", none, err)
	}
}
