package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func aesCodec(t *testing.T, current string, previous ...string) *codec.AESGCM {
	t.Helper()
	keys := make([]codec.Key, 0, 1+len(previous))
	for _, id := range append([]string{current}, previous...) {
		secret := make([]byte, codec.KeySize)
		_, _ = rand.Read(secret)
		keys = append(keys, codec.Key{ID: id, Secret: secret})
	}
	c, err := codec.NewAESGCM(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tap records every message the NATS server carries (client publishes,
// JetStream deliveries and API replies) from now on.
type tap struct {
	mu   sync.Mutex
	msgs [][]byte
}

func newTap(t *testing.T, url string) *tap {
	t.Helper()
	tp := &tap{}
	nc := testenv.Conn(t, url)
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		tp.msgs = append(tp.msgs, append([]byte(m.Subject+" "), m.Data...))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return tp
}

// count returns how many messages seen so far hold s.
func (tp *tap) count(s string) int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	n := 0
	for _, m := range tp.msgs {
		if bytes.Contains(m, []byte(s)) {
			n++
		}
	}
	return n
}

// storedWith counts the messages stored in any stream (tasks, queues,
// dead letters, objects, buckets) whose body or headers hold s.
func storedWith(t *testing.T, js jetstream.JetStream, s string) map[string]int {
	t.Helper()
	ctx := testenv.Context(t, time.Minute)
	found := map[string]int{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			hdr, _ := json.Marshal(m.Header)
			if bytes.Contains(m.Data, []byte(s)) || bytes.Contains(hdr, []byte(s)) {
				found[name]++
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return found
}

// TestCodecEndToEnd runs tasks through a real orchestrator and executor
// with payloads encoded by the client's codec: every submission path
// (Submit, SubmitMany, SubmitGraph, a Submitter, a schedule, a planner's
// shards) reaches its handler in clear, while nothing the server carries
// or stores — AX_TASKS, the queues, the plan object, the schedule bucket —
// holds a clear payload. The orchestrator has no key.
func TestCodecEndToEnd(t *testing.T) {
	t.Parallel()
	cdc := aesCodec(t, "k1")
	srv, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{Codec: cdc})
	c.Codec = cdc
	plain := testenv.Client(t, srv.URL()) // no codec: sees what AX stores
	ctx := testenv.Context(t, 2*time.Minute)

	secret := "SECRET-" + nuid.Next() // in every payload, never on the wire
	var mu sync.Mutex
	got := map[string]string{} // task id → payload its handler saw
	record := func(_ context.Context, j *executor.Job) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		got[j.ID] = string(j.Payload)
		return map[string]string{"done": j.ID}, nil
	}
	ex.HandleFunc("card.charge", record)
	ex.HandleShards("card.batch", executor.Sharded{
		Plan: func(ctx context.Context, j *executor.Job) ([]executor.Shard, error) {
			_, _ = record(ctx, j)
			return []executor.Shard{{Payload: map[string]string{"card": secret, "part": "0"}}, {Payload: map[string]string{"card": secret, "part": "1"}}}, nil
		},
		Shard: record,
	})
	tp := newTap(t, srv.URL())

	payload := func(id string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"card":%q,"for":%q}`, secret, id))
	}
	spec := func(id, typ string) task.Spec {
		return task.Spec{ID: id, Type: typ, Payload: payload(id)}
	}
	if _, err := c.Submit(ctx, spec("one", "card.charge")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubmitMany(ctx, []task.Spec{spec("many-1", "card.charge"), spec("many-2", "card.charge")}); err != nil {
		t.Fatal(err)
	}
	up, down := spec("graph-up", "card.charge"), spec("graph-down", "card.charge")
	down.DependsOn = []string{"graph-up"}
	if _, err := c.SubmitGraph(ctx, []task.Spec{up, down}); err != nil {
		t.Fatal(err)
	}
	sub, err := sdk.NewSubmitter(c, sdk.SubmitterConfig{FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Submit(ctx, spec("buffered", "card.charge")); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.SubmitTyped(ctx, c, "card.charge", map[string]string{"card": secret, "for": "typed"}, &task.Spec{ID: "typed"}); err != nil {
		t.Fatal(err)
	}
	batch := spec("batch", "card.batch")
	batch.Shardable = true
	if _, err := c.Submit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	sched, err := c.CreateSchedule(ctx, task.Schedule{Name: "nightly", Cron: "@every 1s", Template: spec("", "card.charge")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sched.Template.Payload, spec("", "card.charge").Payload) {
		t.Fatalf("CreateSchedule returned template payload %s, want it decoded", sched.Template.Payload)
	}

	ids := []string{"one", "many-1", "many-2", "graph-up", "graph-down", "buffered", "typed", "batch"}
	for _, id := range ids {
		tk, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != task.Succeeded {
			t.Fatalf("%s: %s (%s)", id, tk.State, tk.Reason)
		}
	}
	var scheduled string
	testenv.Eventually(t, time.Minute, "the schedule to fire", func() bool {
		fired, err := c.TaskIDs(ctx, "nightly-")
		if err != nil || len(fired) == 0 {
			return false
		}
		scheduled = fired[0]
		return true
	})
	if err := c.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if tk, err := c.Wait(ctx, scheduled); err != nil {
		t.Fatal(err)
	} else if tk.State != task.Succeeded {
		t.Fatalf("scheduled task %s: %s (%s)", scheduled, tk.State, tk.Reason)
	}
	ids = append(ids, scheduled)

	// Every handler saw its payload in clear.
	mu.Lock()
	for _, id := range ids {
		want := string(payload(id))
		switch id {
		case "typed":
			want = fmt.Sprintf(`{"card":%q,"for":"typed"}`, secret)
		case scheduled:
			want = string(payload(""))
		}
		if got[id] != want {
			t.Errorf("handler of %s got payload %s, want %s", id, got[id], want)
		}
	}
	for i := range 2 {
		id := task.ShardID("batch", i)
		if want := fmt.Sprintf(`{"card":%q,"part":"%d"}`, secret, i); got[id] != want {
			t.Errorf("shard %s got payload %s, want %s", id, got[id], want)
		}
	}
	mu.Unlock()

	// AX_TASKS, read as the orchestrator and the mirror read it: every
	// event's payload is an envelope, never the clear payload.
	js, _ := jetstream.New(plain.Conn())
	st, err := store.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids, task.ShardID("batch", 0), task.ShardID("batch", 1)) {
		h, err := st.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h {
			p := ev.Event.Task.Payload
			var env struct{ AxCodec, Key, Data string }
			if err := json.Unmarshal(p, &env); err != nil || bytes.Contains(p, []byte(secret)) ||
				!strings.Contains(string(p), `"ax_codec":"aes256gcm"`) || env.Key != "k1" || env.Data == "" {
				t.Fatalf("%s revision %d: stored payload %s is not an envelope", id, ev.Revision, p)
			}
		}
	}
	// Whatever else the server stores or carries holds no clear payload
	// either; the envelopes did travel.
	if found := storedWith(t, js, secret); len(found) > 0 {
		t.Errorf("streams holding the clear payload: %v", found)
	}
	if n := tp.count(secret); n > 0 {
		t.Errorf("%d messages on the wire held the clear payload", n)
	}
	if tp.count(`ax_codec`) == 0 {
		t.Fatal("the tap saw no envelope: it saw nothing")
	}

	// The client reads its payloads back in clear; one without the codec
	// sees the envelope.
	if tk, err := c.Get(ctx, "one"); err != nil || !bytes.Equal(tk.Payload, payload("one")) {
		t.Fatalf("Get with the codec: %s, %v", tk.Payload, err)
	}
	if h, err := c.History(ctx, "one"); err != nil || !bytes.Equal(h[len(h)-1].Event.Task.Payload, payload("one")) {
		t.Fatalf("History with the codec: %v", err)
	}
	if tk, err := plain.Get(ctx, "one"); err != nil || bytes.Contains(tk.Payload, []byte(secret)) {
		t.Fatalf("Get without the codec: %s, %v", tk.Payload, err)
	}

	// The check above is not blind: a payload submitted without the codec
	// is found on the wire and in AX_TASKS.
	clear := "CLEAR-" + nuid.Next()
	ex.HandleFunc("clear.task", func(context.Context, *executor.Job) (any, error) { return nil, nil })
	if _, err := plain.Submit(ctx, task.Spec{ID: "in-clear", Type: "clear.task", Payload: json.RawMessage(fmt.Sprintf(`{"v":%q}`, clear))}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Wait(ctx, "in-clear"); err != nil {
		t.Fatal(err)
	}
	if storedWith(t, js, clear)[subject.StreamTasks] == 0 || tp.count(clear) == 0 {
		t.Fatal("a clear payload was not found: the checks above prove nothing")
	}
}

// TestCodecDecodeFailureIsPermanent: a payload the executor cannot decode
// fails its task at the first attempt (no retries, no panic), naming why;
// the executor keeps running the tasks it can decode.
func TestCodecDecodeFailureIsPermanent(t *testing.T) {
	t.Parallel()
	cdc := aesCodec(t, "k1")
	srv, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{Codec: cdc})
	c.Codec = cdc
	ctx := testenv.Context(t, 2*time.Minute)
	var ran sync.Map
	ex.HandleFunc("charge", func(_ context.Context, j *executor.Job) (any, error) {
		ran.Store(j.ID, string(j.Payload))
		return nil, nil
	})

	plain := testenv.Client(t, srv.URL())
	stranger := testenv.Client(t, srv.URL())
	stranger.Codec = aesCodec(t, "k9")
	impostor := testenv.Client(t, srv.URL())
	impostor.Codec = aesCodec(t, "k1") // the same id, another secret
	tampered, _ := cdc.Encode(ctx, []byte(`{"amount":1}`))
	tampered = bytes.Replace(tampered, []byte(`"data":"`), []byte(`"data":"AAAA`), 1)

	for _, tc := range []struct {
		id   string
		c    *sdk.Client
		body string
		says string
	}{
		{"clear", plain, `{"amount":1}`, "payload is not encoded"},
		{"unknown-key", stranger, `{"amount":1}`, `payload encrypted with an unknown key`},
		{"other-secret", impostor, `{"amount":1}`, "payload does not decrypt"},
		{"tampered", plain, string(tampered), "payload does not decrypt"},
		{"good", c, `{"amount":1}`, ""},
	} {
		if _, err := tc.c.Submit(ctx, task.Spec{ID: tc.id, Type: "charge", Payload: json.RawMessage(tc.body)}); err != nil {
			t.Fatal(err)
		}
		tk, err := plain.Wait(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if tc.says == "" {
			if tk.State != task.Succeeded {
				t.Fatalf("%s: %s (%s)", tc.id, tk.State, tk.Reason)
			}
			if p, _ := ran.Load(tc.id); p != tc.body {
				t.Fatalf("%s: handler got %v", tc.id, p)
			}
			continue
		}
		if tk.State != task.Failed || tk.Attempt != 1 || len(tk.Errors) != 1 || !strings.Contains(tk.Errors[0].Error, tc.says) || !strings.Contains(tk.Errors[0].Error, "task "+tc.id) {
			t.Fatalf("%s: %s after %d attempts, errors %+v; want failed after 1 attempt saying %q", tc.id, tk.State, tk.Attempt, tk.Errors, tc.says)
		}
		if _, ok := ran.Load(tc.id); ok {
			t.Fatalf("%s: the handler ran", tc.id)
		}
	}
	// Reading back: a clear payload is read as it is (it was never
	// encoded); one the client's codec cannot decode is an error naming
	// the task, not ciphertext passed off as clear.
	if tk, err := c.Get(ctx, "clear"); err != nil || string(tk.Payload) != `{"amount":1}` {
		t.Fatalf("Get of a clear payload with the codec: %v, %v", tk, err)
	}
	for id, want := range map[string]error{"unknown-key": codec.ErrUnknownKey, "other-secret": codec.ErrDecrypt, "tampered": codec.ErrDecrypt} {
		if _, err := c.Get(ctx, id); !errors.Is(err, want) || !strings.Contains(err.Error(), "task "+id) {
			t.Errorf("Get of %s with the codec: %v, want %v naming the task", id, err, want)
		}
	}
	if dls, err := c.DeadLetters(ctx); !errors.Is(err, codec.ErrUnknownKey) && !errors.Is(err, codec.ErrDecrypt) {
		t.Fatalf("DeadLetters with the codec: %d, %v; want a decode error", len(dls), err)
	}
	if dls, err := plain.DeadLetters(ctx); err != nil || len(dls) != 4 {
		t.Fatalf("DeadLetters without the codec: %d, %v", len(dls), err)
	}
}

// TestCodecAcceptClear: an executor whose codec is wrapped with
// codec.AcceptClear runs payloads submitted in clear (a migration) as well
// as encoded ones, and still refuses one it cannot decrypt.
func TestCodecAcceptClear(t *testing.T) {
	t.Parallel()
	cdc := aesCodec(t, "k1")
	srv, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{Codec: codec.AcceptClear(cdc)})
	ctx := testenv.Context(t, 2*time.Minute)
	var ran sync.Map
	ex.HandleFunc("charge", func(_ context.Context, j *executor.Job) (any, error) {
		ran.Store(j.ID, string(j.Payload))
		return nil, nil
	})
	enc := testenv.Client(t, srv.URL())
	enc.Codec = cdc
	stranger := testenv.Client(t, srv.URL())
	stranger.Codec = aesCodec(t, "k9")
	for _, tc := range []struct {
		id   string
		c    *sdk.Client
		want task.State
	}{{"before", c, task.Succeeded}, {"after", enc, task.Succeeded}, {"stranger", stranger, task.Failed}} {
		if _, err := tc.c.Submit(ctx, task.Spec{ID: tc.id, Type: "charge", Payload: json.RawMessage(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		tk, err := c.Wait(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != tc.want {
			t.Fatalf("%s: %s (%s); want %s", tc.id, tk.State, tk.Reason, tc.want)
		}
		if p, ok := ran.Load(tc.id); tc.want == task.Succeeded && p != `{"n":1}` || tc.want == task.Failed && ok {
			t.Fatalf("%s: handler got %v", tc.id, p)
		}
	}
}

// TestCodecPayloadLimitIsOnTheEncodedForm: the encoded payload is what the
// orchestrator checks against MaxPayload, so the client refuses a payload
// whose encoding goes over it, before sending anything.
func TestCodecPayloadLimitIsOnTheEncodedForm(t *testing.T) {
	t.Parallel()
	_, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	c.Codec = aesCodec(t, "k1")
	c.MaxPayload = 1000
	ctx := testenv.Context(t, time.Minute)
	big := json.RawMessage(`"` + strings.Repeat("x", 900) + `"`) // fits clear, not encoded (base64)
	_, err := c.Submit(ctx, task.Spec{Type: "ok", Payload: big})
	var verr *task.ValidationError
	if !errors.As(err, &verr) || !strings.Contains(err.Error(), "once its payload is encoded") {
		t.Fatalf("Submit of a payload over the limit once encoded: %v", err)
	}
	if _, err := c.Submit(ctx, task.Spec{Type: "ok", Payload: big[:500]}); err == nil {
		t.Fatal("invalid JSON accepted")
	}
	small := json.RawMessage(`"` + strings.Repeat("x", 500) + `"`)
	if _, err := c.Submit(ctx, task.Spec{Type: "ok", Payload: small}); err != nil {
		t.Fatal(err)
	}
}

// TestCodecEncodedPayloadOnAnExecutorWithoutCodec: an executor without the
// codec never runs an encoded payload as if it were clear: the task fails
// permanently at its first attempt, naming the key id, and its handler is
// not called.
func TestCodecEncodedPayloadOnAnExecutorWithoutCodec(t *testing.T) {
	t.Parallel()
	_, ex, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	c.Codec = aesCodec(t, "k-2026-12")
	ctx := testenv.Context(t, time.Minute)
	var ran atomic.Bool
	ex.HandleFunc("charge", func(context.Context, *executor.Job) (any, error) {
		ran.Store(true)
		return nil, nil
	})
	if _, err := c.Submit(ctx, task.Spec{ID: "secret-charge", Type: "charge", Payload: json.RawMessage(`{"amount":1}`), MaxRetries: new(5)}); err != nil {
		t.Fatal(err)
	}
	tk, err := c.Wait(ctx, "secret-charge")
	if err != nil {
		t.Fatal(err)
	}
	if tk.State != task.Failed || tk.Attempt != 1 || len(tk.Errors) != 1 || !strings.Contains(tk.Errors[0].Error, `key "k-2026-12"`) ||
		!strings.Contains(tk.Errors[0].Error, "no codec") {
		t.Fatalf("%s after %d attempts, errors %+v; want failed at once naming key k-2026-12", tk.State, tk.Attempt, tk.Errors)
	}
	if ran.Load() {
		t.Fatal("the handler ran with the ciphertext as its payload")
	}
}
