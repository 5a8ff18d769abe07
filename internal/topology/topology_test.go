package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/subject"
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

// TestPlainMessageCancelsTimer: the orchestrator cancels a timer by
// publishing a plain message that expires on its subject (AX_TIMERS keeps
// one message per subject and allows per-message TTLs): the schedule never
// fires and the stream is left empty.
func TestPlainMessageCancelsTimer(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	ctx := testenv.Context(t, 30*time.Second)
	due := time.Now().Add(time.Second)
	for _, id := range []string{"kept", "cancelled"} {
		m := nats.NewMsg(subject.Timer(subject.TimerRetry, id))
		m.Data = []byte(id)
		m.Header.Set(subject.HeaderSchedule, "@at "+due.UTC().Format(time.RFC3339Nano))
		m.Header.Set(subject.HeaderScheduleTarget, subject.Fire(subject.TimerRetry, id))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, subject.Timer(subject.TimerRetry, "cancelled"), nil, jetstream.WithMsgTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, subject.StreamTimers)
	if err != nil {
		t.Fatal(err)
	}
	// The kept timer fires; by then the cancelled one would have too.
	testenv.Eventually(t, 20*time.Second, "the kept timer fired", func() bool {
		_, err := st.GetLastMsgForSubject(ctx, subject.Fire(subject.TimerRetry, "kept"))
		return err == nil
	})
	time.Sleep(time.Second) // both were due at the same instant
	if _, err := st.GetLastMsgForSubject(ctx, subject.Fire(subject.TimerRetry, "cancelled")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("cancelled timer fired: %v", err)
	}
	testenv.Eventually(t, 20*time.Second, "the cancelling message expired", func() bool {
		_, err := st.GetLastMsgForSubject(ctx, subject.Timer(subject.TimerRetry, "cancelled"))
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
}

// TestEnsureKeepsAnEarlierWorkQueue: a queue stream created by an earlier
// version as a work queue keeps that retention (JetStream cannot change it)
// instead of failing the orchestrator's start.
func TestEnsureKeepsAnEarlierWorkQueue(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: subject.StreamReady, Subjects: []string{subject.ReadyAll},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatalf("Ensure over an earlier work-queue AX_READY: %v", err)
	}
	for _, name := range topology.Queues {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.LimitsPolicy
		if name == subject.StreamReady {
			want = jetstream.WorkQueuePolicy
		}
		if got := st.CachedInfo().Config.Retention; got != want {
			t.Fatalf("%s retention %v, want %v", name, got, want)
		}
	}
}

// A capability's object store is AX_OBJECTS's configuration under its own
// name, with leader reads; Ensure keeps every existing one in step with the
// options (here a new TTL), and Check does not ask for any.
func TestCapabilityObjectStores(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	o := topology.Options{TaskHistoryMaxAge: time.Hour}
	if err := topology.Ensure(ctx, js, o); err != nil {
		t.Fatal(err)
	}
	if err := topology.Check(ctx, js); err != nil {
		t.Fatalf("Check without capability stores: %v", err)
	}
	for range 2 { // idempotent
		for _, c := range []string{"email", "pdf-render_2"} {
			if err := topology.EnsureCapabilityObjects(ctx, js, topology.Options{TaskHistoryMaxAge: time.Hour}, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(ttl time.Duration) {
		t.Helper()
		for _, c := range []string{"email", "pdf-render_2"} {
			s, err := js.Stream(ctx, "OBJ_"+subject.ObjectBucket(c))
			if err != nil {
				t.Fatalf("store of %s: %v", c, err)
			}
			cfg := s.CachedInfo().Config
			if cfg.MaxAge != ttl || cfg.AllowDirect || cfg.Replicas != 1 || cfg.Storage != jetstream.FileStorage || !cfg.AllowRollup {
				t.Fatalf("store of %s: max age %s, direct %v, replicas %d, storage %v, rollup %v; want %s, leader reads, 1 file replica",
					c, cfg.MaxAge, cfg.AllowDirect, cfg.Replicas, cfg.Storage, cfg.AllowRollup, ttl)
			}
		}
	}
	check(time.Hour)
	if err := topology.Ensure(ctx, js, topology.Options{TaskHistoryMaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	check(2 * time.Hour)
}

// Orchestrators dispatching a capability's first tasks at the same moment
// all create its object store: every one of them succeeds (the losers find
// the winner's store), and the store keeps leader reads.
func TestCapabilityObjectStoreCreatedConcurrently(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, 30*time.Second)
	if err := topology.Ensure(ctx, mustJS(t, srv.URL()), topology.Options{}); err != nil {
		t.Fatal(err)
	}
	const racers = 8
	var conns []jetstream.JetStream
	for range racers {
		conns = append(conns, mustJS(t, srv.URL())) // each its own connection, as orchestrators
	}
	for round := range 10 {
		capability := fmt.Sprint("raced-", round)
		errs := make(chan error, racers)
		for _, js := range conns {
			go func() { errs <- topology.EnsureCapabilityObjects(ctx, js, topology.Options{}, capability) }()
		}
		for range racers {
			if err := <-errs; err != nil {
				t.Fatalf("a racing creation of %s's store failed: %v", capability, err)
			}
		}
		s, err := conns[0].Stream(ctx, "OBJ_"+subject.ObjectBucket(capability))
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Fatalf("the store of %s allows direct gets", capability)
		}
	}
}

func mustJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(testenv.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestGroupCommitIsKeptUnlessChanged: group commit is recorded on AX_TASKS
// for every process; a process started without the option keeps it, and
// only an explicit choice turns it off again.
func TestGroupCommitIsKeptUnlessChanged(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	on, off := true, false
	for _, step := range []struct {
		set  *bool
		want bool
	}{{nil, false}, {&on, true}, {nil, true}, {&off, false}, {nil, false}} {
		if err := topology.Ensure(ctx, js, topology.Options{GroupCommit: step.set}); err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, subject.StreamTasks)
		if err != nil {
			t.Fatal(err)
		}
		if got := groupcommit.Enabled(s.CachedInfo().Config); got != step.want {
			t.Fatalf("after Ensure with GroupCommit %v: recorded %v, want %v (metadata %v)", step.set, got, step.want, s.CachedInfo().Config.Metadata)
		}
	}
}

// TestEnsurerResumesWhereItFailed: an Ensure cut off midway (its context
// ends after some requests, as requests time out under faults) is resumed
// by the next call at the steps that failed: the two calls together send
// about as many requests as one whole Ensure, not one and a half, and the
// topology ends complete.
func TestEnsurerResumesWhereItFailed(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	nc := testenv.Conn(t, srv.URL())
	var sent atomic.Int64
	var cut atomic.Pointer[context.CancelFunc]
	trace := &jetstream.ClientTrace{RequestSent: func(string, []byte) {
		if sent.Add(1) == 40 {
			if c := cut.Load(); c != nil {
				(*c)()
			}
		}
	}}
	js, err := jetstream.New(nc, jetstream.WithClientTrace(trace))
	if err != nil {
		t.Fatal(err)
	}
	// One whole Ensure on another server, to count its requests.
	whole := testenv.BareNATS(t)
	var wholeSent atomic.Int64
	wjs, _ := jetstream.New(testenv.Conn(t, whole.URL()), jetstream.WithClientTrace(&jetstream.ClientTrace{
		RequestSent: func(string, []byte) { wholeSent.Add(1) }}))
	ctx := testenv.Context(t, 30*time.Second)
	if err := topology.Ensure(ctx, wjs, topology.Options{}); err != nil {
		t.Fatal(err)
	}

	e := topology.NewEnsurer(js, topology.Options{})
	first, cancel := context.WithCancel(ctx)
	cut.Store(&cancel)
	if err := e.Ensure(first); err == nil {
		t.Fatalf("an Ensure whose context ended after %d of its requests succeeded", sent.Load())
	}
	cancel()
	atFailure := sent.Load()
	if err := e.Ensure(ctx); err != nil {
		t.Fatalf("the Ensure resumed: %v", err)
	}
	total := sent.Load()
	if err := topology.Check(ctx, js); err != nil {
		t.Fatalf("Check after the resumed Ensure: %v", err)
	}
	// The steps that failed are redone (a few requests each; up to the
	// eight run at once can fail together), the done ones not.
	if total > wholeSent.Load()+8*5 {
		t.Fatalf("cut off after %d requests and resumed: %d requests in all, a whole Ensure takes %d", atFailure, total, wholeSent.Load())
	}
	t.Logf("a whole Ensure: %d requests; cut off after %d and resumed: %d in all", wholeSent.Load(), atFailure, total)
}

// TestMissing lists what of the topology does not exist: everything on a
// bare server, nothing once ensured, a stream deleted since.
func TestMissing(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	e := topology.NewEnsurer(js, topology.Options{})
	missing, err := e.Missing(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := len(topology.Streams(topology.Options{})) + len(topology.Buckets(topology.Options{})) + len(topology.ObjectStores(topology.Options{}))
	if len(missing) != all {
		t.Fatalf("on a bare server: %d missing %v, want all %d", len(missing), missing, all)
	}
	if err := e.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if missing, err = e.Missing(ctx); err != nil || len(missing) != 0 {
		t.Fatalf("once ensured: missing %v, %v", missing, err)
	}
	if err := js.DeleteStream(ctx, subject.StreamDLQ); err != nil {
		t.Fatal(err)
	}
	if missing, err = e.Missing(ctx); err != nil || len(missing) != 1 || missing[0] != subject.StreamDLQ {
		t.Fatalf("AX_DLQ deleted: missing %v, %v", missing, err)
	}
}

// TestCapabilityExists: a capability exists once its object store and its
// six ready consumers do, and not when any of them is missing.
func TestCapabilityExists(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	tasks, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		t.Helper()
		ok, err := topology.CapabilityExists(ctx, js, tasks, "img")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists() {
		t.Fatal("exists before anything was created")
	}
	if err := topology.EnsureCapabilityObjects(ctx, js, topology.Options{}, "img"); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("exists without its ready consumers")
	}
	if err := topology.EnsureReadyConsumers(ctx, js, "img"); err != nil {
		t.Fatal(err)
	}
	if !exists() {
		t.Fatal("does not exist once created")
	}
	if err := tasks.DeleteConsumer(ctx, subject.ReadyConsumer("img", 3)); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("exists without its p3 consumer")
	}
}

// TestEnsureKeepsBucketsLeaderRead: ensuring an existing topology never
// turns a bucket's direct gets on, not even for a moment (a process that
// bound the bucket then would read it from any replica, and get no
// responders once they were off again), and a bucket whose settings
// changed is updated without them.
func TestEnsureKeepsBucketsLeaderRead(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	js, _ := jetstream.New(nc)
	ctx := testenv.Context(t, 20*time.Second)
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	// Every stream update request, as the server receives it.
	updates, err := nc.SubscribeSync("$JS.API.STREAM.UPDATE.>")
	if err != nil {
		t.Fatal(err)
	}
	// A setting changed by hand (a smaller history) is set back.
	slots := "KV_" + subject.BucketSlots
	st, err := js.Stream(ctx, slots)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Description = "changed by hand"
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The flush's answer came after every request before it: all are
	// pending.
	n, _, err := updates.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var updated []string
	for range n {
		m, err := updates.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var req jetstream.StreamConfig
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Fatalf("update request %s: %v", m.Data, err)
		}
		if !strings.HasPrefix(req.Name, "KV_") {
			continue
		}
		if req.AllowDirect {
			t.Errorf("Ensure asked for direct gets on %s", req.Name)
		}
		updated = append(updated, req.Name)
	}
	// Ours (the description) and Ensure's; no other bucket changed.
	if want := []string{slots, slots}; !slices.Equal(updated, want) {
		t.Errorf("bucket streams updated %v, want %v", updated, want)
	}
	for _, b := range topology.Buckets(topology.Options{}) {
		st, err := js.Stream(ctx, "KV_"+b.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config; got.AllowDirect || got.Description != b.Description {
			t.Errorf("%s: allow_direct %v, description %q; want leader reads, %q", got.Name, got.AllowDirect, got.Description, b.Description)
		}
	}
}
