package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// Revocations. The orchestrators record the execution of every task they
// cancel or expire in AX_REVOKED (subjects.md), keyed by capability and
// task. An executor watches its capabilities' keys from its start: a
// dispatch of a revoked execution is acknowledged and not run (executors
// read no task record before running a dispatch), and a running one's
// handler is cancelled (only orchestrators write the bucket, so no check is
// needed). A dispatch delivered in the moment between a cancellation and
// its revocation reaching the executor starts, and is cancelled when it
// arrives; its report is ignored either way.

// revocations is what a session knows of revoked executions.
type revocations struct {
	mu       sync.Mutex
	revoked  map[string]struct{} // execution ids
	watchers []jetstream.KeyWatcher
	// stop ends the watchers' context (stopRevocations).
	stop context.CancelFunc
	// owned is the session's goroutines that apply updates.
	owned sync.WaitGroup
}

// has reports whether the execution was revoked.
func (r *revocations) has(executionID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.revoked[executionID]
	return ok
}

// add records a revoked execution and reports whether it was new.
func (r *revocations) add(executionID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked == nil {
		r.revoked = map[string]struct{}{}
	}
	if _, ok := r.revoked[executionID]; ok {
		return false
	}
	r.revoked[executionID] = struct{}{}
	return true
}

// watchRevocations loads the revocations of the executor's capabilities
// and keeps following them until stopRevocations: it returns once what is
// stored was read, so no dispatch is run before its revocation is known.
func (e *Executor) watchRevocations(ctx context.Context, s *session) error {
	kv, err := e.js.KeyValue(ctx, subject.BucketRevoked)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.BucketRevoked, err)
	}
	// The watches outlive Start's context: stopRevocations ends them.
	watchCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.revocations.stop = stop
	for _, capability := range e.cfg.Capabilities {
		w, err := kv.Watch(watchCtx, subject.RevokedCapability(capability), jetstream.IgnoreDeletes())
		if err != nil {
			e.stopRevocations(s)
			return fmt.Errorf("watch the revocations of capability %s: %w", capability, err)
		}
		s.revocations.watchers = append(s.revocations.watchers, w)
		// The stored revocations, then a nil entry.
	initial:
		for {
			select {
			case entry, ok := <-w.Updates():
				if !ok {
					break initial
				}
				if entry == nil {
					break initial
				}
				e.revoke(s, entry.Value())
			case <-ctx.Done():
				e.stopRevocations(s)
				return ctx.Err()
			}
		}
		s.revocations.owned.Add(1)
		go func() {
			defer s.revocations.owned.Done()
			for entry := range w.Updates() {
				if entry != nil {
					e.revoke(s, entry.Value())
				}
			}
		}()
	}
	return nil
}

// revoke applies one revocation: remembered, and the handler of its
// execution, if it runs here, cancelled.
func (e *Executor) revoke(s *session, data []byte) {
	var r task.Revocation
	if err := json.Unmarshal(data, &r); err != nil || r.ExecutionID == "" {
		e.log.Warn("ignoring a malformed revocation", "error", err)
		return
	}
	if s.revocations.add(r.ExecutionID) {
		e.cancelRunning(s, r.ID, r.ExecutionID)
	}
}

// stopRevocations stops the watchers and waits for their goroutines.
func (e *Executor) stopRevocations(s *session) {
	for _, w := range s.revocations.watchers {
		_ = w.Stop()
	}
	if s.revocations.stop != nil {
		s.revocations.stop()
	}
	s.revocations.owned.Wait()
}
