package topology_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
)

// TestEnsureIsIdempotent: every process ensures the topology at start, at
// the same time as others; doing it again changes nothing.
func TestEnsureIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- topology.Ensure(ctx, js, topology.Options{}) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := topology.Check(ctx, js); err != nil {
		t.Fatalf("Check on an existing topology: %v", err)
	}
	for _, cfg := range topology.Streams(topology.Options{}) {
		info, err := js.Stream(ctx, cfg.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
		got := info.CachedInfo().Config
		if got.Retention != cfg.Retention || len(got.Subjects) != len(cfg.Subjects) {
			t.Fatalf("stream %s: %+v", cfg.Name, got)
		}
	}
	for _, b := range topology.Buckets(topology.Options{}) {
		if _, err := js.KeyValue(ctx, b.Bucket); err != nil {
			t.Fatalf("bucket %s: %v", b.Bucket, err)
		}
	}
}
