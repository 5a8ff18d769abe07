package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/singleflight"

	"github.com/ax-run/ax/internal/topology"
)

// Plans and large results live in the object store of their task's
// capability, AX_OBJECTS_<capability>, which only that capability's
// executors may write (deploy/security). The orchestrator, the one owner of
// the topology, creates a capability's store before that capability's first
// dispatch (ensureObjects), and takes from a report only the objects of
// its own attempt, in its capability's store, with their digests
// (checkObjects): readers check every object against the digest recorded.

// maxObjectBuckets bounds the capabilities whose object store an
// orchestrator remembers having ensured. A capability dropped from the
// set costs two lists of names at its next dispatch.
const maxObjectBuckets = 4096

// objectBucketRecheck is how long a capability's object store is taken to
// exist after it was ensured: a store removed by hand is created again at
// the capability's first dispatch after it (until then, attempts that
// store an object fail, and are retried).
const objectBucketRecheck = 10 * time.Minute

// objectBuckets remembers the capabilities whose object store exists (and
// when it was ensured), so a dispatch of a known capability costs no
// request.
type objectBuckets struct {
	mu    sync.Mutex
	known *lru.LRU[string, time.Time]
	// ensuring collapses concurrent first dispatches of one capability
	// into one create-or-update.
	ensuring singleflight.Group
}

func newObjectBuckets() *objectBuckets {
	known, _ := lru.NewLRU[string, time.Time](maxObjectBuckets, nil) // only fails for a size ≤ 0
	return &objectBuckets{known: known}
}

func (b *objectBuckets) has(capability string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.known.Get(capability)
	return ok && now.Sub(at) < objectBucketRecheck
}

// forget makes the next dispatch of capability ensure its store and
// consumers again (one was found missing).
func (b *objectBuckets) forget(capability string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known.Remove(capability)
}

func (b *objectBuckets) add(capability string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known.Add(capability, now)
}

// ensureObjects makes sure the object store and the ready consumers of
// capability exist before a task of it is dispatched (a dispatch stored
// before its level's consumer exists would not be delivered: consumers
// deliver what is stored after their creation): nothing once this
// orchestrator found or created them (for objectBucketRecheck), two lists
// of names the first time, and a few requests more to create what is
// missing.
func (o *Orchestrator) ensureObjects(ctx context.Context, capability string) error {
	if o.buckets.has(capability, o.now()) {
		return nil
	}
	_, err, _ := o.buckets.ensuring.Do(capability, func() (any, error) {
		if o.buckets.has(capability, o.now()) {
			return nil, nil
		}
		// Known to exist (from two lists the meta leader answers): nothing
		// to create, and nothing waits for the leaders of the store and the
		// consumers, which an orchestrator restarted in an outage could not
		// reach, failing the dispatches to its watch (deploy/README).
		if ok, err := topology.CapabilityExists(ctx, o.js, o.tasks, capability); err == nil && ok {
			o.buckets.add(capability, o.now())
			return nil, nil
		}
		if err := topology.EnsureCapabilityObjects(ctx, o.js, o.cfg.Topology, capability); err != nil {
			return nil, fmt.Errorf("create the object store of capability %s: %w", capability, err)
		}
		if err := topology.EnsureReadyConsumers(ctx, o.js, capability); err != nil {
			return nil, fmt.Errorf("create the ready consumers of capability %s: %w", capability, err)
		}
		o.buckets.add(capability, o.now())
		return nil, nil
	})
	return err
}
