package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/task"
)

// The overview shows the key limits set at run time and the concurrency
// keys at or near their limit, read-only, on the page and in
// /api/overview.
func TestConsoleOverviewShowsKeyLimits(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	c := testenv.Client(t, srv.URL())
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	s, err := console.New(console.Config{Client: c, Logger: testenv.Logger(t), OverviewTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	b := (&fixture{t: t, c: c, js: js, url: hs.URL}).browser()

	b.mustGet("/", `id="limits"`, "No key limit set at run time.", "No concurrency key at or near its limit.")

	put := func(bucket, key string, v any) {
		t.Helper()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	put(subject.BucketControl, subject.ControlLimit("customer.*"), task.KeyLimit{Key: "customer.*", Concurrency: 2, Reason: "fair share", By: "alice"})
	put(subject.BucketControl, subject.ControlLimit("gateway.*"), task.KeyLimit{Key: "gateway.*", Concurrency: 10, Adaptive: true, MinConcurrency: 2})
	put(subject.BucketControl, subject.ControlLimit("tenant.>"), task.KeyLimit{Key: "tenant.>", Rate: 50, Per: task.Duration(time.Minute), Weight: 4})
	now := time.Now().UTC()
	put(subject.BucketSlots, "customer.42", task.Slots{Holders: map[string]time.Time{"a": now, "b": now}})
	put(subject.BucketSlots, "customer.7", task.Slots{Holders: map[string]time.Time{"c": now}})
	put(subject.BucketSlots, "gateway.eu", task.Slots{Holders: map[string]time.Time{"d": now}, Limit: 4.5})

	body := b.mustGet("/", `data-limit="customer.*"`, "fair share", `data-limit="gateway.*"`, "adaptive, min 2",
		`data-limit="tenant.&gt;"`, "50 per 1m0s", `id="busy-keys"`, `data-key="customer.42"`, `data-key="gateway.eu"`, "4.50")
	if strings.Contains(body, `data-key="customer.7"`) {
		t.Error("the overview lists customer.7, which uses 1 of its 2 slots, among the keys near their limit")
	}
	b.mustGet("/?part=live", `data-key="customer.42"`)

	var ov console.Overview
	if err := json.Unmarshal([]byte(b.mustGet("/api/overview")), &ov); err != nil {
		t.Fatal(err)
	}
	if len(ov.Limits) != 3 || ov.Limits[0].Limit.Key != "customer.*" || len(ov.Limits[0].Keys) != 2 || len(ov.Errors) != 0 {
		t.Fatalf("overview limits %+v, errors %v", ov.Limits, ov.Errors)
	}
	if len(ov.BusyKeys) != 2 || ov.BusyKeys[0].Key != "customer.42" || ov.BusyKeys[0].Pattern != "customer.*" ||
		ov.BusyKeys[1].Key != "gateway.eu" || ov.BusyKeys[1].Adaptive != 4.5 || ov.BusyKeys[1].Limit != 4 {
		t.Fatalf("overview busy keys %+v", ov.BusyKeys)
	}
}
