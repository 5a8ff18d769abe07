package sdk_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// fakeLimitCommands answers limit commands on core NATS as an orchestrator
// would, with reply, and hands each command's kind, pattern and request to
// seen.
func fakeLimitCommands(t *testing.T, nc *nats.Conn, reply task.CommandReply, seen chan<- limitCmd) {
	t.Helper()
	sub, err := nc.Subscribe("ax.cmd.>", func(m *nats.Msg) {
		_, kind, id, ok := subject.ParseCommand(m.Subject)
		pattern, idOK := subject.ParseLimitID(id)
		var req task.CommandRequest
		if !ok || !idOK || json.Unmarshal(m.Data, &req) != nil {
			t.Errorf("unexpected command %s %q", m.Subject, m.Data)
			return
		}
		seen <- limitCmd{kind, pattern, req}
		data, _ := json.Marshal(reply)
		_ = nc.Publish(m.Header.Get(subject.HeaderReplyTo), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // subscribed before the first command
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

type limitCmd struct {
	kind, pattern string
	req           task.CommandRequest
}

// SetLimit and DeleteLimit send limit-set and limit-delete with the
// pattern's LimitID as id and the limit in the request; a refusal comes
// back as an error; an invalid limit is not sent.
func TestSetLimitSendsTheCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	seen := make(chan limitCmd, 4)
	fakeLimitCommands(t, testenv.Conn(t, srv.URL()), task.CommandReply{OK: true}, seen)

	l := task.KeyLimit{Key: "customer.*", Concurrency: 5, Adaptive: true, MinConcurrency: 2,
		TargetLatency: task.Duration(time.Second), By: "forged", At: time.Unix(1, 0)}
	if err := c.SetLimit(ctx, l, "noisy tenants"); err != nil {
		t.Fatal(err)
	}
	got := <-seen
	if got.kind != subject.CommandLimitSet || got.pattern != "customer.*" || got.req.Reason != "noisy tenants" || got.req.Limit == nil {
		t.Fatalf("limit-set sent %+v", got)
	}
	if sent := *got.req.Limit; sent.Key != l.Key || sent.Concurrency != 5 || !sent.Adaptive || sent.MinConcurrency != 2 ||
		sent.TargetLatency != l.TargetLatency || sent.By != "" || !sent.At.IsZero() {
		t.Fatalf("limit sent %+v: want the limit without who and when", sent)
	}
	if err := c.DeleteLimit(ctx, "customer.*", "over"); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got.kind != subject.CommandLimitDelete || got.pattern != "customer.*" || got.req.Reason != "over" || got.req.Limit != nil {
		t.Fatalf("limit-delete sent %+v", got)
	}

	var verr *task.ValidationError
	if err := c.SetLimit(ctx, task.KeyLimit{Key: "customer.*"}, ""); !errors.As(err, &verr) {
		t.Fatalf("a limit that sets nothing: %v, want a *task.ValidationError", err)
	}
	if err := c.SetLimit(ctx, task.KeyLimit{Key: "a.>.b", Concurrency: 1}, ""); !errors.As(err, &verr) {
		t.Fatalf("an invalid pattern: %v, want a *task.ValidationError", err)
	}
	if err := c.DeleteLimit(ctx, "a b", ""); err == nil {
		t.Fatal("DeleteLimit accepted an invalid pattern")
	}
	select {
	case got := <-seen:
		t.Fatalf("an invalid limit was sent: %+v", got)
	default:
	}
}

// A command the orchestrator refuses is an error naming the pattern and
// the orchestrator's reason.
func TestSetLimitRefused(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	seen := make(chan limitCmd, 1)
	fakeLimitCommands(t, testenv.Conn(t, srv.URL()), task.CommandReply{Error: "no room"}, seen)
	err := c.SetLimit(ctx, task.KeyLimit{Key: "customer.42", Rate: 10, Per: task.Duration(time.Minute)}, "")
	if err == nil || !strings.Contains(err.Error(), "customer.42") || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("refused limit-set: %v", err)
	}
	<-seen
}

// Limits reads the run-time limits from AX_CONTROL and groups the keys
// of AX_SLOTS under the most specific one setting a concurrency; an
// adaptive key's limit is its current value; keys no run-time limit
// matches come last.
func TestLimitsListsLimitsAndKeyUsage(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	c := testenv.Client(t, srv.URL())
	ctx := testenv.Context(t, 30*time.Second)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	put := func(bucket, key string, v any) {
		t.Helper()
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, key, data); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := c.Limits(ctx); err != nil || len(got) != 0 {
		t.Fatalf("no limits: %+v, %v", got, err)
	}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	put(subject.BucketControl, subject.ControlLimit("customer.*"), task.KeyLimit{Key: "customer.*", Concurrency: 5, Reason: "fair", By: "alice", At: at})
	put(subject.BucketControl, subject.ControlLimit("customer.vip"), task.KeyLimit{Key: "customer.vip", Concurrency: 20, Adaptive: true})
	put(subject.BucketControl, subject.ControlLimit("tenant.>"), task.KeyLimit{Key: "tenant.>", Weight: 3})
	put(subject.BucketControl, subject.ControlPauseType("email.send"), task.Pause{Reason: "not a limit"})
	since := time.Now().UTC()
	holders := func(n int) map[string]time.Time {
		h := map[string]time.Time{}
		for i := range n {
			h[task.NewID()+string(rune('a'+i))] = since
		}
		return h
	}
	put(subject.BucketSlots, "customer.42", task.Slots{Holders: holders(5)})
	put(subject.BucketSlots, "customer.7", task.Slots{Holders: holders(1)})
	put(subject.BucketSlots, "customer.vip", task.Slots{Holders: holders(3), Limit: 3.5, Lowered: at})
	put(subject.BucketSlots, "partner.9", task.Slots{Holders: holders(2)})

	got, err := c.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d entries, want 3 limits and the unmatched keys: %+v", len(got), got)
	}
	if l := got[0].Limit; l.Key != "customer.*" || l.Concurrency != 5 || l.By != "alice" || !l.At.Equal(at) || l.Reason != "fair" {
		t.Errorf("first limit %+v", l)
	}
	want := []sdkKeyUsage{{"customer.42", 5, 5, 0, true}, {"customer.7", 1, 5, 0, false}}
	checkKeys(t, "customer.*", got[0].Keys, want)
	if got[1].Limit.Key != "customer.vip" {
		t.Errorf("second limit %+v", got[1].Limit)
	}
	checkKeys(t, "customer.vip", got[1].Keys, []sdkKeyUsage{{"customer.vip", 3, 3, 3.5, true}})
	if !got[1].Keys[0].Lowered.Equal(at) {
		t.Errorf("lowered %v", got[1].Keys[0].Lowered)
	}
	if got[2].Limit.Key != "tenant.>" || got[2].Limit.Weight != 3 || len(got[2].Keys) != 0 {
		t.Errorf("weight-only limit %+v", got[2])
	}
	if got[3].Limit.Key != "" {
		t.Errorf("last entry %+v, want the unmatched keys", got[3].Limit)
	}
	checkKeys(t, "unmatched", got[3].Keys, []sdkKeyUsage{{"partner.9", 2, 0, 0, false}})
}

type sdkKeyUsage struct {
	key          string
	inUse, limit int
	adaptive     float64
	full         bool
}

func checkKeys(t *testing.T, what string, got []sdk.KeyUsage, want []sdkKeyUsage) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: keys %+v, want %+v", what, got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Key != w.key || g.InUse != w.inUse || g.Limit != w.limit || g.Adaptive != w.adaptive || g.Full() != w.full {
			t.Errorf("%s: key %d is %+v (full %v), want %+v", what, i, g, g.Full(), w)
		}
	}
}

// End to end, through an orchestrator: a limit set is listed with who set
// it and when, and an audit event records it; deleted, it is gone.
// Needs the orchestrator's handling of limit-set and limit-delete.
func TestSetLimitThroughAnOrchestrator(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	c.Caller = "alice"
	before := time.Now()
	if err := c.SetLimit(ctx, task.KeyLimit{Key: "customer.*", Concurrency: 2}, "fair share"); err != nil {
		t.Fatal(err)
	}
	got, err := c.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Limit.Key != "customer.*" || got[0].Limit.Concurrency != 2 || got[0].Limit.Reason != "fair share" ||
		!strings.Contains(got[0].Limit.By, "alice") || got[0].Limit.At.Before(before.Add(-time.Second)) {
		t.Fatalf("limits after set: %+v", got)
	}
	testenv.Eventually(t, 10*time.Second, "the audit event of the limit", func() bool {
		evs, err := c.AuditEvents(ctx, 10)
		if err != nil {
			return false
		}
		for _, ev := range evs {
			if ev.Kind == "limit" && ev.Key == "customer.*" {
				return true
			}
		}
		return false
	})
	if err := c.DeleteLimit(ctx, "customer.*", "done"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Limits(ctx); err != nil || len(got) != 0 {
		t.Fatalf("limits after delete: %+v, %v", got, err)
	}
}

// TestConfiguredLimitsAreListed: the orchestrators' configured limits are
// listed, marked configured, until a run-time limit of the same pattern
// replaces one.
func TestConfiguredLimitsAreListed(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{NodeID: "orch-conf", KeyLimits: []task.KeyLimit{
		{Key: "customer.*", Concurrency: 5}, {Key: "tenant.big", Weight: 3}}}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	got, err := c.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Limit.Key != "customer.*" || !got[0].Configured || got[0].Limit.Concurrency != 5 ||
		got[0].Limit.By != "orch-conf" || got[1].Limit.Key != "tenant.big" || got[1].Limit.Weight != 3 || !got[1].Configured {
		t.Fatalf("configured limits: %+v", got)
	}
	if err := c.SetLimit(ctx, task.KeyLimit{Key: "customer.*", Concurrency: 9}, "more"); err != nil {
		t.Fatal(err)
	}
	got, err = c.Limits(ctx)
	if err != nil || len(got) != 2 || got[0].Configured || got[0].Limit.Concurrency != 9 || !got[1].Configured {
		t.Fatalf("a run-time limit replacing a configured one: %+v %v", got, err)
	}
}
