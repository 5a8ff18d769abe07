package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// axRunner runs ax commands against url and checks their exit code.
func axRunner(t *testing.T, url string) func(wantCode int, args ...string) string {
	return func(wantCode int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append(args, "--nats", url), &out, &errOut); code != wantCode {
			t.Fatalf("ax %v exited %d, want %d: %s%s", args, code, wantCode, errOut.String(), out.String())
		}
		return out.String() + errOut.String()
	}
}

// `ax limits` lists the run-time limits with their keys in use, in table
// and JSON output; `ax status` shows the limits and the keys at or near
// their limit.
func TestLimitsListAndStatus(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx := testenv.Context(t, 30*time.Second)
	js, err := jetstream.New(testenv.Conn(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ax := axRunner(t, srv.URL())
	if out := ax(0, "limits"); !strings.Contains(out, "PATTERN") || !strings.Contains(out, "No concurrency key in use") {
		t.Errorf("limits without any:\n%s", out)
	}
	if out := strings.TrimSpace(ax(0, "limits", "-o", "json")); out != "[]" {
		t.Errorf("limits -o json without any: %s", out)
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
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	put(subject.BucketControl, subject.ControlLimit("customer.*"), task.KeyLimit{Key: "customer.*", Concurrency: 4, Reason: "fair share", By: "alice", At: at})
	put(subject.BucketControl, subject.ControlLimit("gateway.*"), task.KeyLimit{Key: "gateway.*", Concurrency: 10, Adaptive: true, MinConcurrency: 2, TargetLatency: task.Duration(2 * time.Second)})
	now := time.Now().UTC()
	put(subject.BucketSlots, "customer.42", task.Slots{Holders: map[string]time.Time{"a": now, "b": now, "c": now, "d": now}})
	put(subject.BucketSlots, "customer.7", task.Slots{Holders: map[string]time.Time{"e": now}})
	put(subject.BucketSlots, "gateway.eu", task.Slots{Holders: map[string]time.Time{"f": now}, Limit: 3.5})
	put(subject.BucketSlots, "partner.9", task.Slots{Holders: map[string]time.Time{"g": now}})

	out := ax(0, "limits")
	for _, want := range []string{
		"customer.*  concurrency 4", "alice", "2026-05-01T12:00:00Z", "fair share",
		"gateway.*   concurrency 10 (adaptive, min 2, target latency 2s)",
		"customer.42  customer.*", "4       4      -     full",
		"customer.7   customer.*  1       4",
		"gateway.eu   gateway.*   1       3      3.50",
		"partner.9    (no limit)  1       ?",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("limits lacks %q:\n%s", want, out)
		}
	}
	var ls []struct {
		Limit struct {
			Key         string `json:"key"`
			Concurrency int    `json:"concurrency"`
		} `json:"limit"`
		Keys []struct {
			Key      string  `json:"key"`
			InUse    int     `json:"in_use"`
			Limit    int     `json:"limit"`
			Adaptive float64 `json:"adaptive"`
		} `json:"keys"`
	}
	raw := ax(0, "limits", "-o", "json")
	checkJSONContract(t, "limits", raw)
	if err := json.Unmarshal([]byte(raw), &ls); err != nil || len(ls) != 3 || ls[0].Limit.Key != "customer.*" || len(ls[0].Keys) != 2 ||
		ls[0].Keys[0].InUse != 4 || ls[1].Keys[0].Adaptive != 3.5 || ls[1].Keys[0].Limit != 3 || ls[2].Limit.Key != "" {
		t.Fatalf("limits -o json: %+v, %v\n%s", ls, err, raw)
	}

	// The overview: the limits, and only the keys at or near their limit
	// (customer.42 full, gateway.eu lowered; not customer.7 nor partner.9).
	out = ax(0, "status")
	for _, want := range []string{"Key limits:", "customer.*  concurrency 4", "2 keys in use", "Keys at or near their limit:", "customer.42", "gateway.eu", "3.50"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	near := out[strings.Index(out, "Keys at or near"):]
	if strings.Contains(near, "customer.7") || strings.Contains(near, "partner.9") {
		t.Errorf("status lists a key far from its limit:\n%s", near)
	}
	ov := checkJSONContract(t, "status", ax(0, "status", "-o", "json")).(map[string]any)
	if l, ok := ov["limits"].([]any); !ok || len(l) != 3 {
		t.Errorf("status -o json limits: %v", ov["limits"])
	}
}

// `ax limits set` turns its flags into the limit it sends; `ax limits rm`
// sends the pattern; an invalid limit is refused before it is sent.
func TestLimitsSetAndRmSendCommands(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.URL())
	type cmd struct {
		caller, kind, pattern string
		req                   task.CommandRequest
	}
	seen := make(chan cmd, 4)
	sub, err := nc.Subscribe("ax.cmd.>", func(m *nats.Msg) {
		caller, kind, id, _ := subject.ParseCommand(m.Subject)
		pattern, _ := subject.ParseLimitID(id)
		var req task.CommandRequest
		_ = json.Unmarshal(m.Data, &req)
		seen <- cmd{caller, kind, pattern, req}
		data, _ := json.Marshal(task.CommandReply{OK: true})
		_ = nc.Publish(m.Header.Get(subject.HeaderReplyTo), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil { // subscribed before the first command
		t.Fatal(err)
	}
	ax := axRunner(t, srv.URL())

	out := ax(0, "limits", "set", "gateway.*", "--concurrency", "8", "--adaptive", "--min", "2", "--target-latency", "1500ms",
		"--rate", "100", "--per", "1m", "--weight", "3", "--reason", "the gateway throttles", "--as", "alice")
	if !strings.Contains(out, "limit gateway.* set: concurrency 8 (adaptive, min 2, target latency 1.5s), rate 100 per 1m0s, weight 3") {
		t.Errorf("set printed %q", out)
	}
	got := <-seen
	want := task.KeyLimit{Key: "gateway.*", Concurrency: 8, Adaptive: true, MinConcurrency: 2, TargetLatency: task.Duration(1500 * time.Millisecond),
		Rate: 100, Per: task.Duration(time.Minute), Weight: 3, Reason: "the gateway throttles"}
	if got.caller != "alice" || got.kind != subject.CommandLimitSet || got.pattern != "gateway.*" || got.req.Reason != "the gateway throttles" ||
		got.req.Limit == nil || *got.req.Limit != want {
		t.Fatalf("set sent %+v (limit %+v)", got, got.req.Limit)
	}
	raw := ax(0, "limits", "set", "tenant.>", "--weight", "5", "-o", "json")
	checkJSONContract(t, "limits set", raw)
	if got := <-seen; got.pattern != "tenant.>" || got.req.Limit.Weight != 5 || !strings.Contains(raw, `"weight": 5`) {
		t.Fatalf("set -o json sent %+v, printed %s", got, raw)
	}

	if out := ax(0, "limits", "rm", "gateway.*", "--reason", "fixed"); !strings.Contains(out, "limit gateway.* removed") {
		t.Errorf("rm printed %q", out)
	}
	if got := <-seen; got.kind != subject.CommandLimitDelete || got.pattern != "gateway.*" || got.req.Reason != "fixed" {
		t.Fatalf("rm sent %+v", got)
	}

	for _, bad := range [][]string{
		{"limits", "set", "gateway.*"}, // sets nothing
		{"limits", "set", "gateway.*", "--adaptive", "--weight", "2"},
		{"limits", "set", "gateway.>.x", "--concurrency", "1"},
		{"limits", "set", "gateway.*", "--concurrency", "20000"},
		{"limits", "rm", "a b"},
		{"limits", "set"},
	} {
		ax(1, bad...)
	}
	select {
	case got := <-seen:
		t.Fatalf("an invalid limit was sent: %+v", got)
	default:
	}
}

// End to end through an orchestrator: set, list, remove. Needs the
// orchestrator's handling of limit-set and limit-delete.
func TestLimitsThroughAnOrchestrator(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ax := axRunner(t, srv.URL())
	ax(0, "limits", "set", "customer.*", "--concurrency", "3", "--reason", "fair share", "--as", "alice")
	out := ax(0, "limits")
	for _, want := range []string{"customer.*", "concurrency 3", "alice", "fair share"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits after set lacks %q:\n%s", want, out)
		}
	}
	if out := ax(0, "status"); !strings.Contains(out, "customer.*  concurrency 3") {
		t.Errorf("status after set:\n%s", out)
	}
	ax(0, "limits", "rm", "customer.*")
	if out := strings.TrimSpace(ax(0, "limits", "-o", "json")); out != "[]" {
		t.Errorf("limits after rm: %s", out)
	}
}
