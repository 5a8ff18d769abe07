package direct

import (
	"context"
	"sync"
)

// Batcher hands messages to the orchestrators in batch direct requests,
// one subject (and addressee, SendTo) at a time: a message for a subject
// with no batch in flight goes at once (alone), and the messages that
// arrive while one is in flight go together in the next (up to MaxBatch)
// — a group commit of requests, so a burst costs a request per batch
// instead of one per message, and a trickle waits for nothing. When a
// full batch or more waits behind the ones in flight (a backlog: an
// executor's reports outrunning one orchestrator), another batch goes
// out beside them, up to maxFlights at once; those extra flights end as
// soon as less than a full batch waits, so a steady stream still forms
// large batches. Its goroutines run while messages wait; Close waits for
// them.
type Batcher struct {
	s *Sender

	mu     sync.Mutex
	queues map[string]*batchQueue
	wg     sync.WaitGroup
}

type batchQueue struct {
	node, subj string
	waiting    []*batchItem
	flushing   bool // its first flush runs: it sends until none waits
	extra      int  // its extra flushes running: each while a full batch waits
}

// maxFlights bounds the batches of one queue in flight at once. An
// executor whose reports queue behind one batch at a time held up to
// 4×capacity attempts (and their memory) waiting: with 2–4 in flight the
// bench's peak memory fell from ~240 to ~193 MiB and its submit→start
// under a burst from ~500 to ~110 ms.
const maxFlights = 4

type batchItem struct {
	ctx     context.Context
	body    []byte
	applied chan bool
}

// NewBatcher returns a Batcher sending through s.
func NewBatcher(s *Sender) *Batcher { return &Batcher{s: s, queues: map[string]*batchQueue{}} }

// Send hands body, what would be stored on subj, to an orchestrator in a
// batch and reports whether it was applied (on false the caller stores
// it). It returns when the batch was answered or ctx ended.
func (b *Batcher) Send(ctx context.Context, subj string, body []byte) bool {
	return b.SendTo(ctx, "", subj, body)
}

// SendTo is Send addressed first to the orchestrator whose node token is
// node (Sender.SendBatchTo; "" for none).
func (b *Batcher) SendTo(ctx context.Context, node, subj string, body []byte) bool {
	it := &batchItem{ctx: ctx, body: body, applied: make(chan bool, 1)}
	key := node + " " + subj
	b.mu.Lock()
	q := b.queues[key]
	if q == nil {
		q = &batchQueue{node: node, subj: subj}
		b.queues[key] = q
	}
	q.waiting = append(q.waiting, it)
	switch {
	case !q.flushing:
		q.flushing = true
		b.wg.Add(1)
		go b.flush(key, q, true)
	case 1+q.extra < maxFlights && len(q.waiting) >= MaxBatch:
		q.extra++
		b.wg.Add(1)
		go b.flush(key, q, false)
	}
	b.mu.Unlock()
	select {
	case ok := <-it.applied:
		return ok
	case <-ctx.Done():
		return false
	}
}

// flush sends q's waiting messages, a batch at a time: a queue's first
// flush until none waits, an extra one (not first) while a full batch
// waits (less is left to the first); key is q's in queues.
func (b *Batcher) flush(key string, q *batchQueue, first bool) {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		n := min(len(q.waiting), MaxBatch)
		if n == 0 || !first && n < MaxBatch {
			if first {
				q.flushing = false
			} else {
				q.extra--
			}
			if !q.flushing && q.extra == 0 {
				delete(b.queues, key)
			}
			b.mu.Unlock()
			return
		}
		batch := q.waiting[:n:n]
		q.waiting = q.waiting[n:]
		b.mu.Unlock()
		// The batch lives as long as its longest-waiting sender's context
		// allows; senders that gave up are sent all the same (harmless:
		// applied twice at worst, as a lost reply is).
		ctx := batch[0].ctx
		for _, it := range batch[1:] {
			if dl, ok := it.ctx.Deadline(); ok {
				if cur, has := ctx.Deadline(); has && dl.After(cur) {
					ctx = it.ctx
				}
			}
		}
		bodies := make([][]byte, n)
		for i, it := range batch {
			bodies[i] = it.body
		}
		applied := b.s.SendBatchTo(context.WithoutCancel(ctx), q.node, q.subj, nil, bodies)
		for i, it := range batch {
			it.applied <- applied[i]
		}
	}
}

// Close waits for the batches in flight.
func (b *Batcher) Close() { b.wg.Wait() }
