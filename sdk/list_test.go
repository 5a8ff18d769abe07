package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// List pages through the tasks newest change first, filtered by state,
// type, capability and last change, from JetStream.
func TestList(t *testing.T) {
	t.Parallel()
	_, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{Capabilities: []string{"default", "other"}})
	ex.HandleFunc("list.fail", func(context.Context, *executor.Job) (any, error) { return nil, executor.Permanent(errors.New("no")) })
	ctx := testenv.Context(t, time.Minute)
	var ok []string
	for i := range 7 {
		id, err := c.Submit(ctx, task.Spec{ID: "ok-" + string(rune('a'+i)), Type: "ok"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, id); err != nil {
			t.Fatal(err)
		}
		ok = append(ok, id)
	}
	for _, s := range []task.Spec{{ID: "f-1", Type: "list.fail"}, {ID: "f-2", Type: "list.fail", Capability: "other"}} {
		if _, err := c.Submit(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Wait(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	mid := time.Now()
	if _, err := c.Submit(ctx, task.Spec{ID: "later", Type: "ok", Delay: task.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the delayed task", func() bool { _, err := c.Get(ctx, "later"); return err == nil })

	// Pages of 3 of the succeeded tasks: newest first, each once.
	var seen []string
	f := sdk.ListFilter{State: task.Succeeded, Limit: 3}
	for pages := 0; ; pages++ {
		p, err := c.List(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range p.Tasks {
			if tk.State != task.Succeeded {
				t.Fatalf("%s is %s", tk.ID, tk.State)
			}
			seen = append(seen, tk.ID)
		}
		if p.Next == "" {
			if pages != 2 {
				t.Fatalf("%d pages for 7 tasks by 3", pages+1)
			}
			break
		}
		f.Cursor = p.Next
	}
	if len(seen) != 7 || seen[0] != ok[6] || seen[6] != ok[0] {
		t.Fatalf("listed %v, want %v newest first", seen, ok)
	}
	for _, c2 := range []struct {
		f    sdk.ListFilter
		want []string
	}{
		{sdk.ListFilter{State: task.Failed}, []string{"f-2", "f-1"}},
		{sdk.ListFilter{Type: "list.fail", Capability: "other"}, []string{"f-2"}},
		{sdk.ListFilter{Since: mid}, []string{"later"}},
		{sdk.ListFilter{Since: mid, State: task.Waiting}, []string{"later"}},
		{sdk.ListFilter{Since: time.Now().Add(time.Hour)}, nil},
		{sdk.ListFilter{State: task.Expired}, nil},
	} {
		p, err := c.List(ctx, c2.f)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, tk := range p.Tasks {
			got = append(got, tk.ID)
		}
		if len(got) != len(c2.want) || (len(got) > 0 && got[0] != c2.want[0]) || p.Next != "" {
			t.Errorf("List(%+v) = %v (next %q), want %v", c2.f, got, p.Next, c2.want)
		}
	}
	for _, bad := range []sdk.ListFilter{{State: "sleeping"}, {Limit: sdk.MaxListLimit + 1}, {Cursor: "nonsense"}, {Type: "a..b"}} {
		if _, err := c.List(ctx, bad); !errors.Is(err, sdk.ErrInvalid) {
			t.Errorf("List(%+v): %v, want ErrInvalid", bad, err)
		}
	}
}
