package edges_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/edges"
	"github.com/ax-run/ax/internal/testenv"
)

func TestAddListForget(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 30*time.Second)
	e, err := edges.New(ctx, js) // testenv.NATS created the streams
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 300 {
		child := fmt.Sprintf("child-%03d", 299-i)
		want = append(want, child)
		if err := e.Add(ctx, "up/a=1", child); err != nil {
			t.Fatal(err)
		}
	}
	// A replay is a no-op; another upstream's edges are not listed.
	if err := e.Add(ctx, "up/a=1", "child-000"); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(ctx, "up/a=10", "other"); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	got, err := e.Dependents(ctx, "up/a=1")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("dependents: %d %v, %v", len(got), got[:min(3, len(got))], err)
	}
	if none, err := e.Dependents(ctx, "nobody"); err != nil || len(none) != 0 {
		t.Fatalf("dependents of nobody: %v, %v", none, err)
	}
	if err := e.Forget(ctx, "up/a=1"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Dependents(ctx, "up/a=1"); err != nil || len(got) != 0 {
		t.Fatalf("after forget: %v, %v", got, err)
	}
	if got, err := e.Dependents(ctx, "up/a=10"); err != nil || !slices.Equal(got, []string{"other"}) {
		t.Fatalf("other upstream: %v, %v", got, err)
	}
}
