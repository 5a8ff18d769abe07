// Package exectoken signs and checks execution tokens: the orchestrator's
// proof, carried in a dispatch, that its holder received that execution.
// An executor sends the token back with the execution's report, claims and
// lease; the orchestrator acts on none of them without a valid one. So an
// executor can report, claim or hold a lease only for the executions it
// was dispatched, although it reads (and could name) every task.
//
// A token is HMAC-SHA-256(key, task id, execution id), truncated to 128
// bits. The key is shared by the orchestrators through the AX_KEYS bucket,
// which only the orchestrator role may read (deploy/security): the first
// orchestrator creates it, the others read it.
package exectoken

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// KeySize is the size of a signing key in bytes.
const KeySize = 32

// tokenSize is the size of a token's MAC in bytes (base64: 22 characters).
const tokenSize = 16

// Key signs and checks tokens. It is safe for concurrent use.
type Key struct {
	macs sync.Pool
}

// New returns a key signing with secret (KeySize bytes).
func New(secret []byte) (*Key, error) {
	if len(secret) != KeySize {
		return nil, fmt.Errorf("execution-token key: %d bytes, want %d", len(secret), KeySize)
	}
	secret = append([]byte(nil), secret...)
	k := &Key{}
	k.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return k, nil
}

// Sign returns the token of a task's execution.
func (k *Key) Sign(taskID, executionID string) string {
	var sum [sha256.Size]byte
	k.mac(taskID, executionID, sum[:0])
	return base64.RawURLEncoding.EncodeToString(sum[:tokenSize])
}

// Valid reports whether token is the token of the task's execution.
func (k *Key) Valid(taskID, executionID, token string) bool {
	var got [tokenSize + 2]byte // room for a token one character too long
	if base64.RawURLEncoding.DecodedLen(len(token)) != tokenSize {
		return false
	}
	n, err := base64.RawURLEncoding.Decode(got[:], []byte(token))
	if err != nil || n != tokenSize {
		return false
	}
	var sum [sha256.Size]byte
	k.mac(taskID, executionID, sum[:0])
	return hmac.Equal(got[:tokenSize], sum[:tokenSize])
}

// mac appends the MAC of the execution to out. The id and execution id are
// length-prefixed, so no two pairs sign the same bytes.
func (k *Key) mac(taskID, executionID string, out []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	defer k.macs.Put(h)
	h.Reset()
	var n [4]byte
	for _, s := range [...]string{taskID, executionID} {
		n[0], n[1], n[2], n[3] = byte(len(s)>>24), byte(len(s)>>16), byte(len(s)>>8), byte(len(s))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return h.Sum(out)
}

// Load returns the cluster's key from the AX_KEYS bucket, creating it if
// no orchestrator did yet. Orchestrators racing to create it agree on the
// first one stored (a create is a compare-and-set). A read that finds
// nothing right after a create failed (a replica behind) is tried again
// until ctx ends.
func Load(ctx context.Context, js jetstream.JetStream) (*Key, error) {
	kv, err := js.KeyValue(ctx, subject.BucketKeys)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", subject.BucketKeys, err)
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		e, err := kv.Get(ctx, subject.KeyExecutionToken)
		if err == nil {
			return New(e.Value())
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read %s/%s: %w", subject.BucketKeys, subject.KeyExecutionToken, err)
		}
		secret := make([]byte, KeySize)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("new execution-token key: %w", err)
		}
		if _, err := kv.Create(ctx, subject.KeyExecutionToken, secret); err == nil {
			return New(secret)
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store %s/%s: %w", subject.BucketKeys, subject.KeyExecutionToken, err)
		}
		// Another orchestrator stored one first: read it.
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s/%s: %w", subject.BucketKeys, subject.KeyExecutionToken, ctx.Err())
		case <-time.After(wait):
		}
	}
}
