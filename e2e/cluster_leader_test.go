//go:build unix

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/consume"
)

// TestClusterConsumerLeaderPause stops (SIGSTOP) the node leading a
// durable R3 consumer while a consume loop connected to another node waits
// for messages: the leader is lost without a word, as under kill -9, a
// pause or a partition. Every message published is handled, and the test
// prints, for a pull expiry of 10 s (what the orchestrator's loops had)
// and consume.DefaultExpiry, how long the server took to elect a new
// leader and how long a message published once it had was then waiting:
// the loop's own delay in pulling from the new leader (it notices its
// lost pull only by missing heartbeats, two of them, each half an
// expiry). Nothing about the times is asserted.
//
// Long: it runs with AX_CLUSTER_LONG=1 (about a minute).
func TestClusterConsumerLeaderPause(t *testing.T) {
	if os.Getenv("AX_CLUSTER_LONG") != "1" {
		t.Skip("long: set AX_CLUSTER_LONG=1")
	}
	c := newCluster(t)
	ncl := startNATSCluster(t, c, 3, false)
	// The test's connection and the loop's go to n1 only; n3 leads the
	// consumer and is paused, n1 leads the stream so publishing goes on.
	conn, err := nats.Connect(ncl.nodes[0].URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LP", Subjects: []string{"lp.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	moveLeader(t, conn, "$JS.API.STREAM.LEADER.STEPDOWN.LP", "n1", func() (string, error) {
		st, err := js.Stream(ctx, "LP")
		if err != nil {
			return "", err
		}
		return st.CachedInfo().Cluster.Leader, nil
	})
	var results []string
	for _, expiry := range []time.Duration{10 * time.Second, consume.DefaultExpiry} {
		var rounds []string
		for round := range 4 {
			name := fmt.Sprintf("c%d-%d", expiry/time.Second, round)
			// The pause falls anywhere between two heartbeats.
			idle := time.Second + time.Duration(round)*expiry/8
			rounds = append(rounds, pauseConsumerLeader(t, ctx, ncl, conn, js, name, expiry, idle))
		}
		results = append(results, fmt.Sprintf("expiry %s: %s", expiry, strings.Join(rounds, ", ")))
	}
	t.Logf("consumer leader paused (new leader elected after the pause / a message published then waited):\n  %s",
		strings.Join(results, "\n  "))
}

// pauseConsumerLeader runs one round of TestClusterConsumerLeaderPause
// and returns its figures.
func pauseConsumerLeader(t *testing.T, ctx context.Context, ncl *natsCluster, conn *nats.Conn, js jetstream.JetStream, name string, expiry, idle time.Duration) string {
	t.Helper()
	var cons jetstream.Consumer
	eventually(t, time.Minute, "consumer "+name+" created", func() (bool, string) {
		var err error
		cons, err = js.CreateConsumer(ctx, "LP", jetstream.ConsumerConfig{Durable: name, FilterSubject: "lp." + name,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	leader := func() (string, error) {
		// Answered by the leader: a paused one leaves the request
		// unanswered until its timeout.
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		info, err := cons.Info(ictx)
		if err != nil {
			return "", err
		}
		if info.Cluster == nil {
			return "", nil
		}
		return info.Cluster.Leader, nil
	}
	moveLeader(t, conn, "$JS.API.CONSUMER.LEADER.STEPDOWN.LP."+name, "n3", leader)

	var mu sync.Mutex
	handled := map[uint64]time.Time{} // stream sequence → first handled
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan error, 1)
	go func() {
		l := consume.Loop{Name: name, Consumer: cons, Workers: 16, Expiry: expiry, AckWait: 5 * time.Second,
			Handle: func(_ context.Context, msg jetstream.Msg) error {
				md, err := msg.Metadata()
				if err != nil {
					return err
				}
				mu.Lock()
				if _, ok := handled[md.Sequence.Stream]; !ok {
					handled[md.Sequence.Stream] = time.Now()
				}
				mu.Unlock()
				return nil
			}}
		loopDone <- l.Run(loopCtx)
	}()
	var published []uint64
	publish := func() time.Time {
		for {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			at := time.Now()
			ack, err := js.Publish(pctx, "lp."+name, nil)
			cancel()
			if err == nil {
				published = append(published, ack.Sequence)
				return at
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for range 50 {
		publish()
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(idle) // the loop's pull waits at the leader
	if err := ncl.pause(2); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var elected time.Duration
	for time.Since(paused) < 20*time.Second {
		if l, err := leader(); err == nil && l != "" && l != "n3" {
			elected = time.Since(paused)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if elected == 0 {
		t.Fatal("no new consumer leader within 20 s of the pause")
	}
	at := publish()
	seq := published[len(published)-1]
	eventually(t, time.Minute, "the message published after the election handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		_, ok := handled[seq]
		return ok, ""
	})
	mu.Lock()
	waited := handled[seq].Sub(at)
	mu.Unlock()
	if err := ncl.resume(2); err != nil {
		t.Fatal(err)
	}
	ncl.waitHealthy(t, ncl.nodes[2], time.Minute)
	eventually(t, time.Minute, "every published message handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, seq := range published {
			if _, ok := handled[seq]; !ok {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d not handled", missing, len(published))
	})
	stopLoop()
	if err := <-loopDone; err != nil {
		t.Errorf("loop: %v", err)
	}
	r := fmt.Sprintf("%s / %s", elected.Round(100*time.Millisecond), waited.Round(10*time.Millisecond))
	t.Logf("expiry %s, pause after %s idle: %s", expiry, idle, r)
	return r
}

// moveLeader steps an R3 stream's or consumer's leader down until node
// `to` leads it (the step-down request prefers it).
func moveLeader(t *testing.T, conn *nats.Conn, stepdown, to string, leader func() (string, error)) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": to}})
	eventually(t, time.Minute, to+" leads "+stepdown, func() (bool, string) {
		l, err := leader()
		if err != nil {
			return false, err.Error()
		}
		if l == to {
			return true, ""
		}
		if l != "" {
			if _, err := conn.Request(stepdown, req, 5*time.Second); err != nil {
				return false, err.Error()
			}
		}
		return false, "led by " + l
	})
}
