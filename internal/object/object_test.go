package object_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/internal/topology"
)

func TestDigest(t *testing.T) {
	t.Parallel()
	// The object store's own form: SHA-256= and URL-safe base64 with padding.
	if got, want := object.Digest([]byte("abc")), "SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="; got != want {
		t.Fatalf("Digest(abc) = %s, want %s", got, want)
	}
	for d, want := range map[string]bool{
		object.Digest(nil): true,
		"":                 false,
		"SHA-256=":         false,
		"sha256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0=":  false,
		"SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0":  false, // no padding
		"SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIA":     false, // short
		"SHA-256=ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=": false, // standard alphabet
	} {
		if got := object.ValidDigest(d); got != want {
			t.Errorf("ValidDigest(%q) = %v, want %v", d, got, want)
		}
	}
}

// Get returns the bytes stored under the recorded digest, and refuses
// bytes overwritten since; an empty bucket is the legacy AX_OBJECTS, an
// empty digest is not checked.
func TestGetChecksTheDigest(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 20*time.Second)
	if err := topology.Ensure(ctx, js, topology.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := topology.EnsureCapabilityObjects(ctx, js, topology.Options{}, "email"); err != nil {
		t.Fatal(err)
	}
	s := object.New(js)
	bucket, name := subject.ObjectBucket("email"), "results/a/x1"
	digest, err := s.Put(ctx, bucket, name, []byte("original"))
	if err != nil || digest != object.Digest([]byte("original")) {
		t.Fatalf("put: %s, %v", digest, err)
	}
	if got, err := s.Get(ctx, bucket, name, digest); err != nil || string(got) != "original" {
		t.Fatalf("get: %q, %v", got, err)
	}
	// Overwritten behind the reader's back (the store's own digest is
	// rewritten with it: only the recorded one tells).
	obs, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, name, []byte("tampered")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, bucket, name, digest)
	if !errors.Is(err, object.ErrDigestMismatch) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), bucket) {
		t.Fatalf("get of a tampered object: %v; want a digest mismatch naming %s in %s", err, name, bucket)
	}
	if got, err := s.Get(ctx, bucket, name, ""); err != nil || string(got) != "tampered" {
		t.Fatalf("get without a digest: %q, %v", got, err)
	}
	// The legacy store.
	legacy, err := js.ObjectStore(ctx, subject.BucketObjects)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.PutBytes(ctx, "results/old/x0", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "", "results/old/x0", ""); err != nil || string(got) != "old" {
		t.Fatalf("legacy get: %q, %v", got, err)
	}
	if _, err := s.Get(ctx, "", name, ""); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("an email object in AX_OBJECTS: %v; want not found", err)
	}
	if _, err := s.Get(ctx, subject.ObjectBucket("pdf"), name, ""); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("a store never created: %v; want bucket not found", err)
	}
	if _, err := s.Get(ctx, "KV_AX_CONTROL", name, ""); !errors.Is(err, object.ErrNotObjectStore) {
		t.Fatalf("another bucket: %v; want ErrNotObjectStore", err)
	}
}

// TestBindGivesUpOnAnUnansweredRequest: binding a store is one JetStream
// API request; one nobody answers (lost in a fault) fails the bind on its
// own bound, for the caller's retry, not at the caller's (here a minute's)
// deadline.
func TestBindGivesUpOnAnUnansweredRequest(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	// The API under a prefix only this test listens on, and never answers.
	sub, err := nc.SubscribeSync("unanswered.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	js, err := jetstream.NewWithAPIPrefix(nc, "unanswered")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	_, err = object.New(js).Bind(ctx, subject.ObjectBucket("email"))
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("bind: %v (the caller's context: %v); want its own deadline passed, the caller's not", err, ctx.Err())
	}
	if _, err := sub.NextMsg(time.Second); err != nil {
		t.Fatalf("the bind's request was not sent: %v", err)
	}
}
