package exectoken_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/exectoken"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
)

func TestSignAndValid(t *testing.T) {
	k, err := exectoken.New(bytes.Repeat([]byte{7}, exectoken.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := exectoken.New(bytes.Repeat([]byte{8}, exectoken.KeySize))
	tok := k.Sign("t1", "exec1")
	if len(tok) != 22 {
		t.Fatalf("token %q: %d characters, want 22", tok, len(tok))
	}
	if !k.Valid("t1", "exec1", tok) {
		t.Fatal("a token is not valid for its own execution")
	}
	if tok != k.Sign("t1", "exec1") {
		t.Fatal("signing is not deterministic")
	}
	for _, c := range []struct{ id, exec, tok string }{
		{"t1", "exec2", tok},                   // another execution of the task
		{"t2", "exec1", tok},                   // another task
		{"t1e", "xec1", k.Sign("t1", "exec1")}, // the same bytes split elsewhere
		{"t1", "exec1", other.Sign("t1", "exec1")},
		{"t1", "exec1", ""},
		{"t1", "exec1", tok[:21]},
		{"t1", "exec1", tok + "A"},
		{"t1", "exec1", strings.Repeat("A", 22)},
		{"t1", "exec1", "!!!!!!!!!!!!!!!!!!!!!!"},
	} {
		if k.Valid(c.id, c.exec, c.tok) {
			t.Errorf("Valid(%q, %q, %q) = true", c.id, c.exec, c.tok)
		}
	}
	if _, err := exectoken.New([]byte("short")); err == nil {
		t.Fatal("a short key was accepted")
	}
}

// Orchestrators starting together agree on one key, which is stored.
func TestLoadAgrees(t *testing.T) {
	srv := testenv.NATS(t)
	nc := testenv.Conn(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, 30*time.Second)
	keys := make([]*exectoken.Key, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := exectoken.Load(ctx, js)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	tok := keys[0].Sign("t", "e")
	for i, k := range keys {
		if !k.Valid("t", "e", tok) {
			t.Fatalf("orchestrator %d loaded another key", i)
		}
	}
	kv, err := js.KeyValue(ctx, subject.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, subject.KeyExecutionToken)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := exectoken.New(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Valid("t", "e", tok) {
		t.Fatal("the stored key is not the one loaded")
	}
}

func BenchmarkSign(b *testing.B) {
	k, _ := exectoken.New(bytes.Repeat([]byte{7}, exectoken.KeySize))
	for b.Loop() {
		k.Sign("task-0001234", "AbCdEfGhIjKlMnOpQrStUv")
	}
}
