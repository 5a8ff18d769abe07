package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/window"
	"github.com/ax-run/ax/task"
)

// retryHorizon bounds how far ahead a retry may be moved by the budget.
const retryHorizon = 24 * time.Hour

// kvWindowCounter is window.HolderCounter on the AX_RETRY_WINDOWS bucket:
// one key per task type and window holding the slots taken and who took
// them ({"n": 3, "h": {"<task>#<attempt>": 0, …}}, at most the limit), advanced
// by compare-and-set so orchestrators share the budget. A retry whose
// allocation is redone — after a conflict on its task, or a crash before
// its write — finds its slot again instead of taking another. Keys expire
// with the bucket's max age. It remembers windows it saw full (which never
// empty) and the slots it took itself.
type kvWindowCounter struct {
	kv jetstream.KeyValue

	mu   sync.Mutex
	full map[string]int64 // key → first window not known to be full
	mine map[string]int64 // key+holder → window of a slot this process took
}

// windowSlots is a window key's value.
type windowSlots struct {
	N       int            `json:"n"`
	Holders map[string]int `json:"h,omitempty"`
}

func parseSlots(data []byte) (windowSlots, error) {
	var s windowSlots
	if n, err := strconv.Atoi(string(data)); err == nil {
		return windowSlots{N: n}, nil // a count written by an older version
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, err
	}
	return s, nil
}

func (c *kvWindowCounter) Take(ctx context.Context, key string, w int64, limit int) (int, bool, error) {
	return c.TakeFor(ctx, key, w, limit, "")
}

func (c *kvWindowCounter) TakeFor(ctx context.Context, key string, w int64, limit int, holder string) (int, bool, error) {
	c.mu.Lock()
	mineW, mine := c.mine[key+"\x00"+holder]
	known := c.full[key] > w && !(mine && mineW == w)
	c.mu.Unlock()
	if known {
		return 0, false, nil
	}
	k := key + ".w" + strconv.FormatInt(w, 10)
	for range maxCASRetries * 4 {
		var s windowSlots
		rev := uint64(0)
		e, err := c.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, false, fmt.Errorf("read retry window %s: %w", k, err)
		default:
			if s, err = parseSlots(e.Value()); err != nil {
				return 0, false, fmt.Errorf("retry window %s holds %q", k, e.Value())
			}
			rev = e.Revision()
		}
		if slot, ok := s.Holders[holder]; ok && holder != "" {
			return slot, true, nil
		}
		if s.N >= limit {
			c.mu.Lock()
			if len(c.full) > 10_000 {
				clear(c.full) // a bound (types are chosen by submitters): losing it costs a read
			}
			if c.full[key] <= w {
				c.full[key] = w + 1
			}
			c.mu.Unlock()
			return 0, false, nil
		}
		slot := s.N
		s.N++
		if holder != "" {
			if s.Holders == nil {
				s.Holders = make(map[string]int)
			}
			s.Holders[holder] = slot
		}
		val, _ := json.Marshal(s)
		if rev == 0 {
			_, err = c.kv.Create(ctx, k, val)
		} else {
			_, err = c.kv.Update(ctx, k, val, rev)
		}
		if err == nil {
			if holder != "" {
				c.mu.Lock()
				if len(c.mine) > 100_000 {
					clear(c.mine) // a bound: losing it costs a read, not a slot
				}
				c.mine[key+"\x00"+holder] = w
				c.mu.Unlock()
			}
			return slot, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, fmt.Errorf("take retry slot %s: %w", k, err)
		}
	}
	return 0, false, fmt.Errorf("take retry slot in %s: too much contention", key)
}

// retryHolder names the retry that follows t's current attempt in the
// retry budget.
func retryHolder(t task.Task) string { return t.ID + "#" + strconv.Itoa(t.Attempt) }

// retryPolicy returns the retry budget of a task type.
func (o *Orchestrator) retryPolicy(taskType string) window.Policy {
	if p, ok := o.cfg.RetryBudgetByType[taskType]; ok {
		return p.WithDefaults()
	}
	return o.cfg.RetryBudget.WithDefaults()
}

// allocateRetry returns when a retry of a type wanted at desired may start
// under the type's budget: desired, or a later window with room. holder
// names the retry (task and attempt): allocating again for it takes no
// second slot.
func (o *Orchestrator) allocateRetry(ctx context.Context, taskType, holder string, desired time.Time) (time.Time, error) {
	p := o.retryPolicy(taskType)
	horizon := int(retryHorizon / p.Width)
	at, err := p.AllocateFor(ctx, o.retrySlots, taskType, holder, desired, horizon)
	if errors.Is(err, window.ErrExhausted) {
		o.log.Warn("retry budget exhausted for a day ahead; retrying after it", slog.String("type", taskType))
		return desired.Add(retryHorizon), nil
	}
	return at, err
}

func (o *Orchestrator) bindRetrySlots(ctx context.Context) error {
	kv, err := leaderget.BindKV(ctx, o.js, subject.BucketRetryWindows, o.reads)
	if err != nil {
		return fmt.Errorf("bind %s: %w", subject.BucketRetryWindows, err)
	}
	o.retrySlots = &kvWindowCounter{kv: kv, full: make(map[string]int64), mine: make(map[string]int64)}
	return nil
}
