package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/window"
)

// retryHorizon bounds how far ahead a retry may be moved by the budget.
const retryHorizon = 24 * time.Hour

// kvWindowCounter is window.Counter on the AX_RETRY_WINDOWS bucket: one key
// per task type and window holding the slots taken, advanced by
// compare-and-set so orchestrators share the budget. Keys expire with the
// bucket's max age. It remembers windows it saw full, which never empty.
type kvWindowCounter struct {
	kv jetstream.KeyValue

	mu   sync.Mutex
	full map[string]int64 // key → first window not known to be full
}

func (c *kvWindowCounter) Take(ctx context.Context, key string, w int64, limit int) (int, bool, error) {
	c.mu.Lock()
	known := c.full[key] > w
	c.mu.Unlock()
	if known {
		return 0, false, nil
	}
	k := key + ".w" + strconv.FormatInt(w, 10)
	for range maxCASRetries * 4 {
		n, rev := 0, uint64(0)
		e, err := c.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, false, fmt.Errorf("read retry window %s: %w", k, err)
		default:
			if n, err = strconv.Atoi(string(e.Value())); err != nil {
				return 0, false, fmt.Errorf("retry window %s holds %q", k, e.Value())
			}
			rev = e.Revision()
		}
		if n >= limit {
			c.mu.Lock()
			if c.full[key] <= w {
				c.full[key] = w + 1
			}
			c.mu.Unlock()
			return 0, false, nil
		}
		val := []byte(strconv.Itoa(n + 1))
		if rev == 0 {
			_, err = c.kv.Create(ctx, k, val)
		} else {
			_, err = c.kv.Update(ctx, k, val, rev)
		}
		if err == nil {
			return n, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, fmt.Errorf("take retry slot %s: %w", k, err)
		}
	}
	return 0, false, fmt.Errorf("take retry slot in %s: too much contention", key)
}

// retryPolicy returns the retry budget of a task type.
func (o *Orchestrator) retryPolicy(taskType string) window.Policy {
	if p, ok := o.cfg.RetryBudgetByType[taskType]; ok {
		return p.WithDefaults()
	}
	return o.cfg.RetryBudget.WithDefaults()
}

// allocateRetry returns when a retry of a type wanted at desired may start
// under the type's budget: desired, or a later window with room.
func (o *Orchestrator) allocateRetry(ctx context.Context, taskType string, desired time.Time) (time.Time, error) {
	p := o.retryPolicy(taskType)
	horizon := int(retryHorizon / p.Width)
	at, err := p.Allocate(ctx, o.retrySlots, taskType, desired, horizon)
	if errors.Is(err, window.ErrExhausted) {
		o.log.Warn().Str("type", taskType).Msg("retry budget exhausted for a day ahead; retrying after it")
		return desired.Add(retryHorizon), nil
	}
	return at, err
}

func (o *Orchestrator) bindRetrySlots(ctx context.Context) error {
	kv, err := o.js.KeyValue(ctx, subject.BucketRetryWindows)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.BucketRetryWindows, err)
	}
	o.retrySlots = &kvWindowCounter{kv: kv, full: make(map[string]int64)}
	return nil
}
