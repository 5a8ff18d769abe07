package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/exectrace"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/tracing"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

func attr(s tracetest.SpanStub, k attribute.Key) string {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestTraceOfADAGWithARetry runs a → b → c, where b's first attempt fails,
// submitted inside a producer's span, and checks the tree the spans form:
// one trace; the submission under the producer; every dispatch under it,
// each attempt under its dispatch and the handler's own span under the
// attempt; the retry; and each released task's dispatch linked to the
// outcome of the task that released it.
func TestTraceOfADAGWithARetry(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{TracerProvider: tp,
		Retry: orchestrator.RetryPolicy{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Hooks: []executor.AttemptHook{exectrace.Hook(tp)}})
	c := testenv.Client(t, srv.URL())
	var mu sync.Mutex
	failed := false
	ex.HandleFunc("step", func(ctx context.Context, j *executor.Job) (any, error) {
		_, span := tp.Tracer("user").Start(ctx, "user.work")
		defer span.End()
		// a ends only once the whole graph exists, so b and c are each
		// released by their upstream's end (not found ready at creation).
		for j.ID == "a" {
			if _, err := c.Get(ctx, "c"); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if j.ID == "b" && !failed {
			failed = true
			return nil, errors.New("first attempt of b fails")
		}
		return nil, nil
	})
	testenv.Start(t, ex)
	ctx := testenv.Context(t, 30*time.Second)

	pctx, producer := tp.Tracer("producer").Start(ctx, "checkout")
	var specs []task.Spec
	for _, id := range []string{"a", "b", "c"} {
		s, _ := task.New("step", nil)
		s.ID, s.Priority = id, new(1)
		specs = append(specs, s)
	}
	specs[1].DependsOn, specs[2].DependsOn = []string{"a"}, []string{"b"}
	if _, err := c.SubmitGraph(pctx, specs); err != nil {
		t.Fatal(err)
	}
	producer.End()
	for _, id := range []string{"a", "b", "c"} {
		if got, err := c.Wait(ctx, id); err != nil || got.State != task.Succeeded {
			t.Fatalf("%s: %v %v", id, got.State, err)
		}
	}

	want := map[string]int{"checkout": 1, tracing.SpanSubmit: 1, tracing.SpanDispatch: 4, tracing.SpanAttempt: 4,
		"user.work": 4, tracing.SpanRetry: 1, tracing.SpanOutcome: 3}
	count := func() map[string]int {
		n := map[string]int{}
		for _, s := range exp.GetSpans() {
			n[s.Name]++
		}
		return n
	}
	testenv.Eventually(t, 10*time.Second, "every span ended", func() bool {
		ok := fmt.Sprint(count()) == fmt.Sprint(want)
		if !ok && testing.Verbose() {
			t.Logf("spans %v", count())
		}
		return ok
	})

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
		byName[s.Name] = append(byName[s.Name], s)
		if s.SpanContext.TraceID() != producer.SpanContext().TraceID() {
			t.Errorf("span %s is in trace %s, not the producer's %s", s.Name, s.SpanContext.TraceID(), producer.SpanContext().TraceID())
		}
	}
	parentOf := func(s tracetest.SpanStub) tracetest.SpanStub { return byID[s.Parent.SpanID()] }
	submit := byName[tracing.SpanSubmit][0]
	if submit.Parent.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("ax.submit's parent is not the producer's span")
	}
	outcomeOf := map[string]tracetest.SpanStub{}
	for _, s := range byName[tracing.SpanOutcome] {
		if parentOf(s).Name != tracing.SpanSubmit || attr(s, tracing.AttrState) != string(task.Succeeded) {
			t.Errorf("ax.outcome of %s: parent %q, state %q", attr(s, tracing.AttrTaskID), parentOf(s).Name, attr(s, tracing.AttrState))
		}
		outcomeOf[attr(s, tracing.AttrTaskID)] = s
	}
	retry := byName[tracing.SpanRetry][0]
	if attr(retry, tracing.AttrTaskID) != "b" || attr(retry, tracing.AttrAttempt) != "1" || parentOf(retry).Name != tracing.SpanSubmit || attr(retry, tracing.AttrRetryAt) == "" {
		t.Errorf("ax.retry: task %q attempt %q parent %q retry_at %q", attr(retry, tracing.AttrTaskID), attr(retry, tracing.AttrAttempt), parentOf(retry).Name, attr(retry, tracing.AttrRetryAt))
	}
	var dispatches []string
	for _, d := range byName[tracing.SpanDispatch] {
		id, attempt := attr(d, tracing.AttrTaskID), attr(d, tracing.AttrAttempt)
		dispatches = append(dispatches, id+"#"+attempt)
		if parentOf(d).Name != tracing.SpanSubmit {
			t.Errorf("dispatch of %s#%s: parent %q", id, attempt, parentOf(d).Name)
		}
		// A task released by its upstream's end links to that end.
		up := map[string]string{"b": "a", "c": "b"}[id]
		linked := false
		for _, l := range d.Links {
			linked = linked || l.SpanContext.SpanID() == outcomeOf[up].SpanContext.SpanID()
		}
		if up != "" && attempt == "1" && !linked {
			t.Errorf("dispatch of %s is not linked to the outcome of %s (links %v)", id, up, d.Links)
		}
	}
	sort.Strings(dispatches)
	if fmt.Sprint(dispatches) != "[a#1 b#1 b#2 c#1]" {
		t.Errorf("dispatches %v", dispatches)
	}
	for _, a := range byName[tracing.SpanAttempt] {
		d := parentOf(a)
		if d.Name != tracing.SpanDispatch || attr(d, tracing.AttrExecutionID) != attr(a, tracing.AttrExecutionID) || attr(a, tracing.AttrExecutionID) == "" {
			t.Errorf("attempt %s#%s: parent %q (execution %q vs %q)", attr(a, tracing.AttrTaskID), attr(a, tracing.AttrAttempt), d.Name, attr(d, tracing.AttrExecutionID), attr(a, tracing.AttrExecutionID))
		}
		for _, k := range []attribute.Key{tracing.AttrTaskType, tracing.AttrPriority, tracing.AttrCapability} {
			if attr(a, k) == "" {
				t.Errorf("attempt span has no %s", k)
			}
		}
		if attr(a, tracing.AttrTaskID) == "b" && attr(a, tracing.AttrAttempt) == "1" && a.Status.Code.String() != "Error" {
			t.Errorf("b's failed attempt has status %v", a.Status)
		}
	}
	for _, u := range byName["user.work"] {
		if parentOf(u).Name != tracing.SpanAttempt {
			t.Errorf("the handler's span is under %q, not ax.attempt", parentOf(u).Name)
		}
	}
}
