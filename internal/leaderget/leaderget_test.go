package leaderget_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/testenv"
)

// stream creates a stream of one replica that does not allow direct gets
// (so its reads go through its leader, as a replicated stream's do) and
// writes two messages on a.1 (the second with a header) and one on b.
func stream(t *testing.T, js jetstream.JetStream, name string, replicas int) jetstream.Stream {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	cfg := jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Replicas: replicas}
	st, err := js.CreateStream(ctx, cfg)
	// A new cluster elects its meta leader before every peer is known
	// ("no suitable peers for placement"): wait for them.
	for err != nil && ctx.Err() == nil && strings.Contains(err.Error(), "no suitable peers") {
		time.Sleep(100 * time.Millisecond)
		st, err = js.CreateStream(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if st.CachedInfo().Config.AllowDirect {
		t.Fatalf("stream %s allows direct gets: its reads would not go through its leader", name)
	}
	for _, m := range []*nats.Msg{
		{Subject: name + ".a.1", Data: []byte("first")},
		{Subject: name + ".a.1", Data: []byte("second"), Header: nats.Header{"X-Ax": []string{"yes"}}},
		{Subject: name + ".b", Data: []byte("other")},
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	return st
}

// TestReadsAsJetStreamDoes: a Reader's answers are the jetstream package's
// (message, headers, sequence, time; not found; a missing stream), on a
// stream read through its leader.
func TestReadsAsJetStreamDoes(t *testing.T) {
	s := testenv.BareNATS(t)
	nc := testenv.Conn(t, s.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := stream(t, js, "LG", 1)
	wrapped := leaderget.Wrap(st, leaderget.New(js))
	ctx := testenv.Context(t, 30*time.Second)

	for _, subj := range []string{"LG.a.1", "LG.b"} {
		want, err := st.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wrapped.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Fatalf("last on %s: %v", subj, err)
		}
		same(t, got, want)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		want, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		got, err := wrapped.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		same(t, got, want)
	}
	if _, err := wrapped.GetLastMsgForSubject(ctx, "LG.none"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("last on a subject without messages: %v, want ErrMsgNotFound", err)
	}
	if _, err := wrapped.GetMsg(ctx, 99); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("a sequence past the end: %v, want ErrMsgNotFound", err)
	}
	var apiErr *jetstream.APIError
	if _, err := leaderget.New(js).Last(ctx, "GHOST", "GHOST.x"); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamNotFound {
		t.Fatalf("a read of a missing stream: %v, want the server's stream not found", err)
	}
}

func same(t *testing.T, got, want *jetstream.RawStreamMsg) {
	t.Helper()
	if got.Subject != want.Subject || got.Sequence != want.Sequence || string(got.Data) != string(want.Data) ||
		!got.Time.Equal(want.Time) || fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
		t.Fatalf("read %+v, jetstream read %+v", got, want)
	}
}

// unavailable answers every leader read of stream under prefix as a member
// that believes the stream has no leader does: at once, 503 with err_code
// 10008. It stands in for that member: a real cluster makes one only under
// faults, and not on cue (the cluster chaos run's probe counts the real
// ones, e2e/cluster_probe_test.go).
func unavailable(t *testing.T, url, prefix, stream string) {
	t.Helper()
	nc := testenv.Conn(t, url)
	body, _ := json.Marshal(map[string]any{
		"type":  "io.nats.jetstream.api.v1.stream_msg_get_response",
		"error": map[string]any{"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"},
	})
	if _, err := nc.Subscribe(prefix+"STREAM.MSG.GET."+stream, func(m *nats.Msg) { _ = m.Respond(body) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestWaitsPastAnUnavailableMember: a member's "unavailable" answer may
// come before the leader's; a plain read takes whichever comes first, a
// Reader waits for the leader's. First against a real stream (its server
// answers as the leader, a member's 10008 races it), then with the
// leader's answer coming 100 ms after the member's, every time.
func TestWaitsPastAnUnavailableMember(t *testing.T) {
	s := testenv.BareNATS(t)
	nc := testenv.Conn(t, s.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st := stream(t, js, "LG", 1)
	unavailable(t, s.URL(), jetstream.DefaultAPIPrefix, "LG")
	ctx := testenv.Context(t, 30*time.Second)

	plainRefused := 0
	wrapped := leaderget.Wrap(st, leaderget.New(js))
	for range 50 {
		if _, err := st.GetLastMsgForSubject(ctx, "LG.a.1"); err != nil {
			plainRefused++
		}
		got, err := wrapped.GetLastMsgForSubject(ctx, "LG.a.1")
		if err != nil {
			t.Fatalf("read with a member unavailable and the leader answering: %v", err)
		}
		if string(got.Data) != "second" || got.Sequence != 2 {
			t.Fatalf("read %q at %d, want \"second\" at 2", got.Data, got.Sequence)
		}
	}
	t.Logf("plain reads refused: %d of 50", plainRefused)

	// A leader that answers 100 ms after the member, under a domain.
	late, err := jetstream.NewWithDomain(nc, "late")
	if err != nil {
		t.Fatal(err)
	}
	unavailable(t, s.URL(), "$JS.late.API.", "LG")
	leader := testenv.Conn(t, s.URL())
	answer, _ := json.Marshal(map[string]any{
		"type":    "io.nats.jetstream.api.v1.stream_msg_get_response",
		"message": map[string]any{"subject": "LG.a.1", "seq": 7, "data": []byte("late"), "time": time.Now().UTC()},
	})
	if _, err := leader.Subscribe("$JS.late.API.STREAM.MSG.GET.LG", func(m *nats.Msg) {
		time.AfterFunc(100*time.Millisecond, func() { _ = m.Respond(answer) })
	}); err != nil {
		t.Fatal(err)
	}
	if err := leader.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := leaderget.New(late).Last(ctx, "LG", "LG.a.1")
	if err != nil {
		t.Fatalf("read with the leader answering after a member: %v", err)
	}
	if string(got.Data) != "late" || got.Sequence != 7 {
		t.Fatalf("read %q at %d, want the leader's \"late\" at 7", got.Data, got.Sequence)
	}
}

// TestUnavailableWhenNoLeaderAnswers: with only "unavailable" answers (the
// stream has no leader) a read returns that error after its grace, not at
// the context's deadline; with nobody listening, no responders. The
// reads go under a JetStream domain nobody serves (its API prefix used).
func TestUnavailableWhenNoLeaderAnswers(t *testing.T) {
	s := testenv.BareNATS(t)
	nc := testenv.Conn(t, s.URL())
	js, err := jetstream.NewWithDomain(nc, "elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	unavailable(t, s.URL(), "$JS.elsewhere.API.", "LG")
	r := leaderget.New(js)

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, err = r.Last(ctx, "LG", "LG.a.1")
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10008 {
		t.Fatalf("a read only members without a leader answer: %v, want their 10008", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the read waited for its context's end")
	}

	if _, err := r.Last(ctx, "NOBODY", "NOBODY.x"); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("a read nobody listens to: %v, want no responders", err)
	}
}

// TestReadsOnACluster: on a replicated stream of a 3-server cluster, a
// Reader on each server's connection reads what was written.
func TestReadsOnACluster(t *testing.T) {
	c, err := natsserver.StartCluster(3, natsserver.Config{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	nc := testenv.Conn(t, c.Servers[0].ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream(t, js, "LG", 3)
	ctx := testenv.Context(t, time.Minute)
	for i, srv := range c.Servers {
		js, err := jetstream.New(testenv.Conn(t, srv.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		st := leaderget.NewLazy(js, "LG", leaderget.New(js))
		// A bind is one API request, which a cluster just formed may
		// leave unanswered (a fresh clone's CI run saw one through server
		// 2 wait out 30 s): each try has its own 5 s, as a caller that
		// retries would.
		for {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := st.Bind(tctx)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("bind through server %d: %v", i+1, err)
			}
			t.Logf("bind through server %d: %v; trying again", i+1, err)
			time.Sleep(100 * time.Millisecond)
		}
		got, err := st.GetLastMsgForSubject(ctx, "LG.a.1")
		if err != nil {
			t.Fatalf("read through server %d: %v", i+1, err)
		}
		if string(got.Data) != "second" || got.Header.Get("X-Ax") != "yes" {
			t.Fatalf("read through server %d: %q %v", i+1, got.Data, got.Header)
		}
	}
}

// TestKVGetsAsJetStreamDoes: a bucket read through a Reader answers as
// jetstream's Get does: a value and its revision, a deleted and a purged
// key (ErrKeyDeleted with the marker), a missing key, an invalid one.
func TestKVGetsAsJetStreamDoes(t *testing.T) {
	s := testenv.BareNATS(t)
	js, err := jetstream.New(testenv.Conn(t, s.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	plain, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LGKV", History: 5})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_LGKV")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false // as internal/topology makes every bucket
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func() error{
		func() error { _, err := plain.Put(ctx, "a", []byte("one")); return err },
		func() error { _, err := plain.Put(ctx, "a", []byte("two")); return err },
		func() error { _, err := plain.Put(ctx, "gone", []byte("x")); return err },
		func() error { return plain.Delete(ctx, "gone") },
		func() error { _, err := plain.Put(ctx, "purged", []byte("x")); return err },
		func() error { return plain.Purge(ctx, "purged") },
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := leaderget.BindKV(ctx, js, "LGKV", leaderget.New(js))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err = js.KeyValue(ctx, "LGKV"); err != nil { // bound again: it reads through the leader
		t.Fatal(err)
	}
	for _, key := range []string{"a", "gone", "purged", "missing", "bad key", ".a"} {
		want, werr := plain.Get(ctx, key)
		got, gerr := kv.Get(ctx, key)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Fatalf("get %q: error %v, jetstream's %v", key, gerr, werr)
		}
		if (want == nil) != (got == nil) {
			t.Fatalf("get %q: entry %v, jetstream's %v", key, got, want)
		}
		if want == nil {
			continue
		}
		if got.Key() != want.Key() || got.Bucket() != want.Bucket() || string(got.Value()) != string(want.Value()) ||
			got.Revision() != want.Revision() || got.Operation() != want.Operation() || !got.Created().Equal(want.Created()) {
			t.Fatalf("get %q: %s=%q rev %d op %v at %v; jetstream's %s=%q rev %d op %v at %v", key,
				got.Key(), got.Value(), got.Revision(), got.Operation(), got.Created(),
				want.Key(), want.Value(), want.Revision(), want.Operation(), want.Created())
		}
	}
}

// TestLazyBindsOnlyWhenNeeded: a Lazy stream sends nothing when made, reads
// through its leader without a binding, binds for what a read cannot do,
// and a bind that failed (the stream missing) is tried again at the next use.
func TestLazyBindsOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	l := leaderget.NewLazy(js, "LAZY", leaderget.New(js))
	if _, err := l.Info(ctx); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Info of a missing stream: %v, want ErrStreamNotFound", err)
	}
	if err := l.Bind(ctx); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("Bind of a missing stream: %v, want ErrStreamNotFound", err)
	}
	st := stream(t, js, "LAZY", 1)
	if err := l.Bind(ctx); err != nil {
		t.Fatalf("Bind once the stream exists: %v", err)
	}
	last, err := l.GetLastMsgForSubject(ctx, "LAZY.a.1")
	if err != nil {
		t.Fatal(err)
	}
	want, err := st.GetLastMsgForSubject(ctx, "LAZY.a.1")
	if err != nil {
		t.Fatal(err)
	}
	if last.Sequence != want.Sequence || string(last.Data) != string(want.Data) {
		t.Fatalf("last on LAZY.a.1: seq %d %q, want %d %q", last.Sequence, last.Data, want.Sequence, want.Data)
	}
	if m, err := l.GetMsg(ctx, 1); err != nil || m.Subject != "LAZY.a.1" {
		t.Fatalf("GetMsg 1: %+v %v", m, err)
	}
	if m, err := l.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("LAZY.b")); err != nil || m.Subject != "LAZY.b" {
		t.Fatalf("GetMsg 1 filtered on LAZY.b: %+v %v", m, err)
	}
	if err := l.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.GetMsg(ctx, 1); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("GetMsg of a deleted message: %v", err)
	}
	if err := l.Purge(ctx, jetstream.WithPurgeSubject("LAZY.a.1")); err != nil {
		t.Fatal(err)
	}
	info, err := l.Info(ctx, jetstream.WithSubjectFilter("LAZY.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects; len(got) != 1 || got["LAZY.b"] != 1 {
		t.Fatalf("subjects after the purge of LAZY.a.1: %v, want LAZY.b only", got)
	}
}
