package consume_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/tcpproxy"
	"github.com/ax-run/ax/internal/testenv"
)

// setup returns a work-queue stream with one message and a consumer on it.
func setup(t *testing.T, ackWait time.Duration) (jetstream.JetStream, jetstream.Consumer) {
	t.Helper()
	srv := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Conn(t, srv.URL()))
	ctx := testenv.Context(t, 10*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	return js, cons
}

func run(t *testing.T, l *consume.Loop) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	return func() { cancel(); <-done }
}

func pending(t *testing.T, cons jetstream.Consumer) (uint64, int) {
	t.Helper()
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending, info.NumAckPending
}

func TestFailedMessagesAreRedelivered(t *testing.T) {
	t.Parallel()
	_, cons := setup(t, 30*time.Second)
	var calls atomic.Int32
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, Handle: func(context.Context, jetstream.Msg) error {
		if calls.Add(1) < 3 {
			return errors.New("transient")
		}
		return nil
	}})
	defer stop()
	testenv.Eventually(t, 10*time.Second, "handled after two failures", func() bool {
		p, a := pending(t, cons)
		return calls.Load() == 3 && p == 0 && a == 0
	})
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler called %d times, want 3 (two naks, one ack)", n)
	}
}

func TestLongHandlerKeepsItsLease(t *testing.T) {
	t.Parallel()
	_, cons := setup(t, time.Second)
	var calls atomic.Int32
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, AckWait: time.Second,
		Handle: func(context.Context, jetstream.Msg) error {
			calls.Add(1)
			time.Sleep(3 * time.Second) // three ack waits
			return nil
		}})
	defer stop()
	testenv.Eventually(t, 10*time.Second, "handled", func() bool {
		p, a := pending(t, cons)
		return calls.Load() >= 1 && p == 0 && a == 0
	})
	if n := calls.Load(); n != 1 {
		t.Fatalf("a handler outliving the ack wait was called %d times: its lease was not kept", n)
	}
}

func TestStopFinishesMessagesInHand(t *testing.T) {
	t.Parallel()
	_, cons := setup(t, 30*time.Second)
	entered := make(chan struct{})
	var once sync.Once
	var finished atomic.Bool
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, Handle: func(context.Context, jetstream.Msg) error {
		once.Do(func() { close(entered) })
		time.Sleep(500 * time.Millisecond)
		finished.Store(true)
		return nil
	}})
	<-entered
	stop() // returns only once the handler in hand is done and acked
	if !finished.Load() {
		t.Fatal("Run returned before the handler in hand finished")
	}
	// Acks are asynchronous: the server records this one a moment later.
	testenv.Eventually(t, 5*time.Second, "the message in hand acked", func() bool {
		p, a := pending(t, cons)
		return p == 0 && a == 0
	})
}

// TestPoisonAfterDeliveryLimit: a message whose handler keeps failing is
// kept as poison, with its subject and the reason, after MaxDeliveries, and
// the loop stops retrying it.
func TestPoisonAfterDeliveryLimit(t *testing.T) {
	t.Parallel()
	js, cons := setup(t, 30*time.Second)
	ctx := testenv.Context(t, 30*time.Second)
	var calls atomic.Int32 // AX_POISON exists: testenv creates AX's topology
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, MaxDeliveries: 3,
		Poison: consume.KeepPoison(js, "c"),
		Handle: func(context.Context, jetstream.Msg) error {
			calls.Add(1)
			return errors.New("cannot apply:\nnever")
		}})
	defer stop()
	testenv.Eventually(t, 20*time.Second, "poisoned and acknowledged", func() bool {
		n, ack := pending(t, cons)
		return calls.Load() >= 3 && n == 0 && ack == 0
	})
	st, err := js.Stream(ctx, subject.StreamPoison)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, subject.Poison("c", 1))
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "x" || msg.Header.Get(subject.HeaderPoisonSubject) != "t.1" ||
		msg.Header.Get(subject.HeaderPoisonReason) != "cannot apply: never" || msg.Header.Get(subject.HeaderPoisonDeliveries) != "3" {
		t.Fatalf("poison message %q %v", msg.Data, msg.Header)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("handler called %d times, want 3", n)
	}
}

// TestUnavailableIsNotPoison: a handler failing only because JetStream
// did not answer (an outage: a 503, no responders, a timeout, a
// compare-and-set that lost too often in a row) is retried
// past MaxDeliveries instead of kept as poison, and the message is applied
// once it answers again.
func TestUnavailableIsNotPoison(t *testing.T) {
	t.Parallel()
	js, cons := setup(t, 30*time.Second)
	outage := []error{
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		fmt.Errorf("write task x: %w", jetstream.ErrNoStreamResponse),
		fmt.Errorf("get task x: %w", nats.ErrNoResponders),
		fmt.Errorf("read slots: %w", context.DeadlineExceeded),
		// A compare-and-set that lost every try (a deposed leader answering
		// reads from behind).
		fmt.Errorf("dispatch x: change the slots of key k: %w", consume.ErrContended),
	}
	var calls atomic.Int32
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, MaxDeliveries: 2,
		Poison: consume.KeepPoison(js, "c"),
		Handle: func(context.Context, jetstream.Msg) error {
			n := int(calls.Add(1))
			if n <= 2*len(outage) {
				return outage[(n-1)%len(outage)]
			}
			return nil
		}})
	defer stop()
	testenv.Eventually(t, 30*time.Second, "applied after the outage", func() bool {
		p, a := pending(t, cons)
		return calls.Load() == int32(2*len(outage)+1) && p == 0 && a == 0
	})
	ctx := testenv.Context(t, 10*time.Second)
	st, err := js.Stream(ctx, subject.StreamPoison)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(ctx, subject.Poison("c", 1)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a message failing for an outage was kept as poison (err %v)", err)
	}
	for _, err := range outage {
		if !consume.Unavailable(err) {
			t.Errorf("Unavailable(%v) = false", err)
		}
	}
	for _, err := range []error{errors.New("cannot apply"), &jetstream.APIError{Code: 400, ErrorCode: 10059, Description: "stream not found"}, jetstream.ErrMsgNotFound} {
		if consume.Unavailable(err) {
			t.Errorf("Unavailable(%v) = true", err)
		}
	}
}

// TestBusyHandlersDropNothing: while every worker is busy the messages
// pulled ahead wait for them, and the server's heartbeats and notices keep
// arriving meanwhile — and a reconnect (the connection cut for a moment)
// makes the loop pull afresh while they wait. Nothing may be dropped as a
// slow consumer's (a dropped message waits out its ack wait: a minute
// here): every message is handled at its first delivery, and the
// connection reports no slow consumer.
func TestBusyHandlersDropNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	proxy, err := tcpproxy.New("127.0.0.1:0", strings.TrimPrefix(srv.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var slow atomic.Int32
	nc, err := nats.Connect("nats://"+proxy.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				slow.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := testenv.Context(t, time.Minute)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprint("t.", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	var handled, redelivered atomic.Int32
	stop := run(t, &consume.Loop{Name: "c", Consumer: cons, Workers: 1, Expiry: time.Second, AckWait: time.Minute,
		Handle: func(_ context.Context, msg jetstream.Msg) error {
			if md, err := msg.Metadata(); err != nil || md.NumDelivered > 1 {
				redelivered.Add(1)
			}
			time.Sleep(50 * time.Millisecond) // the run spans heartbeat intervals
			handled.Add(1)
			return nil
		}})
	defer stop()
	testenv.Eventually(t, 30*time.Second, "a few handled", func() bool { return handled.Load() >= 10 })
	proxy.Cut()
	time.Sleep(200 * time.Millisecond)
	proxy.Restore()
	testenv.Eventually(t, 50*time.Second, "every message handled", func() bool { return handled.Load() >= n })
	if s, r := slow.Load(), redelivered.Load(); s > 0 || r > 0 {
		t.Fatalf("%d messages dropped as a slow consumer's, %d redelivered", s, r)
	}
}
