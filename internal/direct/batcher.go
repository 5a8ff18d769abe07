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
// instead of one per message, and a trickle waits for nothing. Its
// goroutines run while messages wait; Close waits for them.
type Batcher struct {
	s *Sender

	mu     sync.Mutex
	queues map[string]*batchQueue
	wg     sync.WaitGroup
}

type batchQueue struct {
	node, subj string
	waiting    []*batchItem
	inFlight   bool
}

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
	if !q.inFlight {
		q.inFlight = true
		b.wg.Add(1)
		go b.flush(key, q)
	}
	b.mu.Unlock()
	select {
	case ok := <-it.applied:
		return ok
	case <-ctx.Done():
		return false
	}
}

// flush sends q's waiting messages, a batch at a time, until none waits;
// key is q's in queues.
func (b *Batcher) flush(key string, q *batchQueue) {
	defer b.wg.Done()
	for {
		b.mu.Lock()
		n := min(len(q.waiting), MaxBatch)
		if n == 0 {
			q.inFlight = false
			delete(b.queues, key)
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
