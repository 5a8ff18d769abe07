// Package consume runs a durable pull consumer: it keeps pull requests
// outstanding (no busy polling), hands each message to a handler on a bounded
// pool of workers, acks what was handled and naks with a growing delay what
// failed, so a transient outage turns into redelivery rather than loss.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// Handler processes one message. A nil error acks it; an error naks it with
// a delay growing with the number of deliveries. Handlers must be idempotent:
// a message can be delivered again after a crash. Their context has no
// deadline: every JetStream request is bounded by the client's timeout.
type Handler func(ctx context.Context, msg jetstream.Msg) error

// Loop consumes one durable consumer.
type Loop struct {
	// Name appears in logs.
	Name string
	// Consumer to read from.
	Consumer jetstream.Consumer
	// Workers bounds concurrent handlers. Default 64.
	Workers int
	// Batch is how many messages are requested per pull, and buffered
	// ahead of the handlers at most: each waits there with its ack wait
	// running. Default 256 (bounded by Workers: see Run).
	Batch int
	// MaxBytes, when set, bounds the bytes of messages buffered ahead of
	// the handlers instead of Batch, so large messages (256 KiB payloads)
	// do not make the buffer's memory follow the backlog. It must exceed
	// the largest message.
	MaxBytes int
	// Expiry is how long one pull request waits on the server. The
	// server's heartbeats come every half of it, and two missed ones make
	// the loop pull again: a consumer whose leader was lost without a
	// word (its node killed, stopped or cut off) is pulled from its new
	// leader within an expiry of the election. Default DefaultExpiry.
	Expiry time.Duration
	// Handle is called for every message.
	Handle Handler
	// AckWait is the consumer's ack wait; a handler still running after a
	// third of it extends the message's lease. Default 30s.
	AckWait time.Duration
	// Log receives warnings about failed handlers. Default nil: no logs.
	Log *slog.Logger
	// MaxDeliveries is the delivery at which a message whose handler still
	// fails is handed to Poison instead of being retried again. 0: retry
	// for ever.
	MaxDeliveries uint64
	// Poison keeps a message that could not be handled (see MaxDeliveries)
	// where an operator can see and re-drive it; the message is then
	// terminated. An error from it retries the message later.
	Poison func(ctx context.Context, msg jetstream.Msg, reason error) error
}

// DefaultExpiry is a pull request's default expiry: short, because the
// client notices a lost pull only by its missing heartbeats (10 s of them
// at nats.go's default 30 s expiry), and a task waiting on the consumer
// waits that long after the server elected a new leader. An idle loop
// costs a pull request every DefaultExpiry and a heartbeat every half.
const DefaultExpiry = 2 * time.Second

// ErrEnded is wrapped by Run's error when the loop ended for a reason
// other than ctx: the consumer was deleted, or its pulls stopped answering.
var ErrEnded = errors.New("consume loop ended")

// Run consumes until ctx is cancelled, then stops pulling, finishes the
// messages in hand and returns nil. If the loop ends for any other reason
// (it cannot start, the consumer was deleted, its heartbeats stopped) it
// finishes the messages in hand and returns an error: see Supervise.
func (l *Loop) Run(ctx context.Context) error {
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	workers := l.Workers
	if workers <= 0 {
		workers = 64
	}
	batch := l.Batch
	if batch <= 0 {
		batch = 256
	}
	// No more buffered ahead of the handlers than they take in a moment:
	// a message waiting there uses up its ack wait, and the ack wait is
	// what a crash of this process delays the messages it held by.
	batch = min(batch, max(workers, 16))
	var limit jetstream.PullConsumeOpt = jetstream.PullMaxMessages(batch)
	if l.MaxBytes > 0 {
		limit = jetstream.PullMaxMessagesWithBytesLimit(batch, l.MaxBytes)
	}
	expiry := l.Expiry
	if expiry <= 0 {
		expiry = DefaultExpiry
	}
	// A callback subscription, not the Messages iterator: the iterator
	// buffers what it pulled in a channel of exactly the batch's size, so
	// while the workers were busy a heartbeat, a notice or a fresh pull
	// after a reconnect overflowed it and the server's messages were
	// dropped as a slow consumer's (each then waited out its ack wait, and
	// the pull accounting stalled the loop). The callback hands each
	// message to Run, which takes it when a worker is free; until then the
	// client's heartbeat check is off, and the subscription's own buffer
	// (hundreds of thousands of messages) holds the few pulled ahead.
	// Handlers get a context that outlives ctx so in-hand messages finish.
	hctx := context.WithoutCancel(ctx)
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer wg.Wait() // last: once pulls stopped
	in := make(chan jetstream.Msg)
	errs := make(chan error, 16)
	quit := make(chan struct{})
	// gone receives the error that ends the loop when a check after
	// missing heartbeats found the consumer deleted; checking is set
	// while one runs (the loop goes on taking messages meanwhile).
	gone := make(chan error, 1)
	var checking atomic.Bool
	cc, err := l.Consumer.Consume(func(msg jetstream.Msg) {
		select {
		case in <- msg:
		case <-quit: // Run returned: the message is redelivered
		}
	}, limit, jetstream.PullExpiry(expiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		select {
		case errs <- err:
		default: // Run has errors to read already
		}
	}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", l.Name, err)
	}
	defer close(quit)
	defer cc.Stop() // first: no more pulls
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		for msg := (jetstream.Msg)(nil); msg == nil; {
			select {
			case msg = <-in:
			case err := <-errs:
				if err := l.failed(ctx, err, &checking, gone); err != nil {
					<-sem
					return err
				}
				continue
			case err := <-gone:
				<-sem
				return err
			case <-cc.Closed():
				<-sem
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%w: %s: its subscription closed", ErrEnded, l.Name)
			case <-ctx.Done():
				<-sem
				return nil
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				l.handle(hctx, msg)
			}()
		}
	}
}

// failed handles an error the consumer reported: nil to go on (its pulls
// go on by themselves), or the error that ends the loop.
func (l *Loop) failed(ctx context.Context, err error, checking *atomic.Bool, gone chan<- error) error {
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest),
		errors.Is(err, jetstream.ErrConnectionClosed):
		return fmt.Errorf("%w: %s: %w", ErrEnded, l.Name, err)
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		// No heartbeat from the server: the consumer may be gone
		// (deleted, or lost with a stream), its leader lost (the client
		// has pulled again already) or NATS unreachable. Whether it is
		// gone is asked aside: an answer can take the request timeout,
		// and messages from a new leader must not wait for it.
		if checking.CompareAndSwap(false, true) {
			go func() {
				defer checking.Store(false)
				ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, ierr := l.Consumer.Info(ictx)
				cancel()
				if errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrConsumerDoesNotExist) {
					select {
					case gone <- fmt.Errorf("%w: %s: %w", ErrEnded, l.Name, ierr):
					default: // one is enough
					}
				}
			}()
		}
	}
	l.Log.Warn("pull failed; retrying", slog.Any("error", err), slog.String("consumer", l.Name))
	return nil
}

func (l *Loop) handle(ctx context.Context, msg jetstream.Msg) {
	ackWait := l.AckWait
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	// No deadline here: each JetStream call in a handler then gets the
	// client's own request timeout, so a reply lost in a server restart
	// fails that call in seconds instead of stalling the whole handler.
	hctx := ctx
	// Keep the lease while a long handler runs, so it is not redelivered
	// to another orchestrator meanwhile. The timer costs nothing unless
	// the handler outlives a third of the ack wait.
	var mu sync.Mutex
	done := false
	var beat *time.Timer
	mu.Lock() // the callback reads beat
	beat = time.AfterFunc(ackWait/3, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			_ = msg.InProgress()
			beat.Reset(ackWait / 3)
		}
	})
	mu.Unlock()
	err := l.Handle(hctx, msg)
	mu.Lock()
	done = true
	beat.Stop()
	mu.Unlock()
	if err == nil {
		if err := msg.Ack(); err != nil {
			l.Log.Warn("ack failed; message will be redelivered", slog.Any("error", err), slog.String("consumer", l.Name), slog.String("subject", msg.Subject()))
		}
		return
	}
	delivered := uint64(1)
	if md, mdErr := msg.Metadata(); mdErr == nil {
		delivered = md.NumDelivered
	}
	// A handler that failed because NATS or JetStream did not answer (a
	// stream or consumer without a leader, a server restarting) is tried
	// again soon and kept as poison only after far more deliveries: the
	// message is fine, and waiting out an outage is not a reason to set it
	// aside, nor to leave it up to 10 s behind the outage's end.
	unavailable := Unavailable(err)
	poisonAt := l.MaxDeliveries
	if unavailable {
		poisonAt *= UnavailableDeliveries
	}
	if l.MaxDeliveries > 0 && delivered >= poisonAt && l.Poison != nil {
		if perr := l.Poison(ctx, msg, err); perr == nil {
			l.Log.Error("message could not be applied; kept as poison for re-drive (ax poison)", slog.Any("error", err), slog.String("consumer", l.Name), slog.String("subject", msg.Subject()), slog.Uint64("deliveries", delivered))
			_ = msg.Term()
			return
		} else {
			l.Log.Warn("cannot keep a poison message; will retry it", slog.Any("error", perr), slog.String("consumer", l.Name))
		}
	}
	delay := NakDelay(delivered)
	if unavailable {
		delay = min(delay, maxUnavailableDelay)
	}
	l.Log.Warn("handler failed; will retry", slog.Any("error", err), slog.String("consumer", l.Name), slog.String("subject", msg.Subject()), slog.Uint64("deliveries", delivered), slog.Duration("redeliver_in", delay))
	_ = msg.NakWithDelay(delay)
}

// KeepPoison returns a Poison func that publishes the message, with its
// subject, the reason and its delivery count in headers, to
// subject.Poison(consumer, stream sequence) through js (de-duplicated on that
// subject, so a retried poisoning keeps one copy).
func KeepPoison(js jetstream.JetStream, consumer string) func(ctx context.Context, msg jetstream.Msg, reason error) error {
	return func(ctx context.Context, msg jetstream.Msg, reason error) error {
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("poison: metadata: %w", err)
		}
		out := nats.NewMsg(subject.Poison(consumer, md.Sequence.Stream))
		out.Data = msg.Data()
		out.Header.Set(subject.HeaderPoisonSubject, msg.Subject())
		out.Header.Set(subject.HeaderPoisonReason, truncate(reason.Error(), 4096))
		out.Header.Set(subject.HeaderPoisonDeliveries, strconv.FormatUint(md.NumDelivered, 10))
		out.Header.Set(subject.HeaderMsgID, out.Subject)
		if _, err := js.PublishMsg(ctx, out); err != nil {
			return fmt.Errorf("poison: keep %s: %w", out.Subject, err)
		}
		return nil
	}
}

// truncate makes s a header value: one line of at most n bytes.
func truncate(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// UnavailableDeliveries multiplies MaxDeliveries for a message whose
// handler fails only because NATS or JetStream does not answer
// (Unavailable): at the orchestrator's default of 50, a message is kept as
// poison after about 17 minutes of such failures in a row, not 8.
const UnavailableDeliveries = 10

// maxUnavailableDelay caps the redelivery delay after a failure for want
// of an answer (Unavailable): outages end, and a message should follow
// within about a second of the end, not up to NakDelay's 10 s.
const maxUnavailableDelay = 2 * time.Second

// ErrContended says a compare-and-set lost every one of its tries in a row
// (the callers' bound). Under faults that is the store, not the message: a
// deposed leader cut off by a partition answers reads from behind until it
// notices, and every write against what it read conflicts at the new one
// (a chaos run's dispatches hit it in bursts after store outages). So it
// counts as Unavailable: tried again within maxUnavailableDelay, not after
// NakDelay's growing backoff.
var ErrContended = errors.New("too many concurrent changes")

// Unavailable reports whether err is NATS or JetStream not answering for
// now: no responders, a request timed out, a connection reconnecting, a
// stream that did not answer a publish, or a 503 (no leader, no quorum);
// or a compare-and-set that lost too often in a row (ErrContended).
func Unavailable(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, ErrContended) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503)
}

// NakDelay is the redelivery delay after the n-th failed delivery: 100ms,
// doubling, capped at 10s.
func NakDelay(n uint64) time.Duration {
	d := 100 * time.Millisecond
	for i := uint64(1); i < n && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// Supervise runs a Loop on the consumer bind returns, recreating it with
// backoff (100 ms doubling to 5 s) whenever it ends for a reason other than
// ctx, so a deleted consumer or a lost stream never leaves its messages
// unconsumed while the process looks healthy. up (may be nil) is told when
// the loop runs and when it is being recreated. It returns when ctx ends.
func Supervise(ctx context.Context, l Loop, bind func(ctx context.Context) (jetstream.Consumer, error), up func(running bool)) {
	if up == nil {
		up = func(bool) {}
	}
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		cons, err := bind(ctx)
		if err == nil {
			l.Consumer = cons
			up(true)
			started := time.Now()
			err = l.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			if time.Since(started) > time.Minute {
				wait = 100 * time.Millisecond
			}
		}
		up(false)
		l.Log.Error("consume loop ended; recreating its consumer", slog.Any("error", err), slog.String("consumer", l.Name), slog.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}
