// Package object reads and writes AX's objects: planners' shard lists and
// results over task.InlineResultLimit.
//
// Each capability has its own object store, AX_OBJECTS_<capability>
// (subject.ObjectBucket): an executor writes the objects of the tasks it
// runs into its capability's store, which only that capability's executors
// may write (deploy/security), so an executor of one capability cannot
// replace or delete another's. References to objects carry the store's
// name (task.Task.ResultBucket, task.PlanRef.Bucket…); an empty one is the
// legacy AX_OBJECTS, where records written before per-capability stores
// name their objects.
//
// The executor reports each object's digest (Digest), the orchestrator
// records it with the reference, and every read here checks the bytes
// against it: an object overwritten after its report is an error wrapping
// ErrDigestMismatch, never a result. A reference without a digest (written
// before digests) is read unchecked.
package object

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// ErrDigestMismatch means an object's bytes are not those its writer
// reported: it was overwritten (or damaged) after the report.
var ErrDigestMismatch = errors.New("digest mismatch")

// ErrNotObjectStore means a reference names a bucket that is not one of
// AX's object stores.
var ErrNotObjectStore = errors.New("not an AX object store")

// digestPrefix is the digest's algorithm, as the object store writes its
// own digests (`nats object info` shows the same form).
const digestPrefix = "SHA-256="

// Digest is the SHA-256 of data as AX records it: "SHA-256=" and the hash
// in URL-safe base64 (with padding), the form of the object store's own
// digests.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return digestPrefix + base64.URLEncoding.EncodeToString(sum[:])
}

// ValidDigest reports whether d has the form Digest returns.
func ValidDigest(d string) bool {
	enc, ok := strings.CutPrefix(d, digestPrefix)
	if !ok {
		return false
	}
	sum, err := base64.URLEncoding.DecodeString(enc)
	return err == nil && len(sum) == sha256.Size
}

// Bucket is the object store a reference names: bucket, or the legacy
// AX_OBJECTS when it is empty.
func Bucket(bucket string) string {
	if bucket == "" {
		return subject.BucketObjects
	}
	return bucket
}

// bindTimeout bounds binding a store, one JetStream API request (the
// stream's info), whatever the caller's deadline: a request lost in a
// fault is tried again by the caller's retry, not waited out for the
// whole of a longer deadline (a chaos run: an executor's shard plan held
// 45 s by three binds of 15 s each). It is nats.go's own default for an
// API request.
const bindTimeout = 5 * time.Second

// MaxBound is how many object stores a Stores keeps bound; one bound
// again after it was dropped costs one more request.
const MaxBound = 256

// Stores binds AX's object stores when first used and keeps the MaxBound
// most recently used. It is safe for concurrent use.
type Stores struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	bound *lru.LRU[string, jetstream.ObjectStore]
}

// New returns Stores reading and writing through js. It binds nothing yet.
func New(js jetstream.JetStream) *Stores {
	bound, _ := lru.NewLRU[string, jetstream.ObjectStore](MaxBound, nil) // only fails for a size ≤ 0
	return &Stores{js: js, bound: bound}
}

// Bind returns the object store bucket ("": AX_OBJECTS), binding it at its
// first use. A store that does not exist is an error wrapping
// jetstream.ErrBucketNotFound; a name that is not one of AX's object
// stores one wrapping ErrNotObjectStore.
func (s *Stores) Bind(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	bucket = Bucket(bucket)
	if _, ok := subject.ObjectBucketCapability(bucket); !ok && bucket != subject.BucketObjects {
		return nil, fmt.Errorf("bind object store %q: %w", bucket, ErrNotObjectStore)
	}
	s.mu.Lock()
	obs, ok := s.bound.Get(bucket)
	s.mu.Unlock()
	if ok {
		return obs, nil
	}
	bctx, cancel := context.WithTimeout(ctx, bindTimeout)
	obs, err := s.js.ObjectStore(bctx, bucket)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bind object store %s: %w", bucket, err)
	}
	s.mu.Lock()
	s.bound.Add(bucket, obs)
	s.mu.Unlock()
	return obs, nil
}

// Put stores data as the object name of bucket and returns its digest.
func (s *Stores) Put(ctx context.Context, bucket, name string, data []byte) (digest string, err error) {
	obs, err := s.Bind(ctx, bucket)
	if err != nil {
		return "", err
	}
	if _, err := obs.PutBytes(ctx, name, data); err != nil {
		return "", fmt.Errorf("put object %s in %s: %w", name, Bucket(bucket), err)
	}
	return Digest(data), nil
}

// Get reads the object name of bucket ("": AX_OBJECTS) and checks its
// bytes against digest: an error wrapping ErrDigestMismatch, naming the
// object, when they differ. An empty digest (a reference recorded before
// digests) is not checked. A missing object is an error wrapping
// jetstream.ErrObjectNotFound, a missing store one wrapping
// jetstream.ErrBucketNotFound.
func (s *Stores) Get(ctx context.Context, bucket, name, digest string) ([]byte, error) {
	obs, err := s.Bind(ctx, bucket)
	if err != nil {
		return nil, err
	}
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("get object %s from %s: %w", name, Bucket(bucket), err)
	}
	if digest == "" {
		return data, nil
	}
	if got := Digest(data); got != digest {
		return nil, fmt.Errorf("object %s in %s: %w: its report recorded %s, the stored bytes hash to %s (overwritten after its report?)",
			name, Bucket(bucket), ErrDigestMismatch, digest, got)
	}
	return data, nil
}
