package outbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-run/ax/codec"
	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/outbox"
	"github.com/ax-run/ax/task"
)

// TestEncodedPayload: a payload encoded with codec.EncodePayload before
// Enqueue is ciphertext in the ax_outbox row and on its way through the
// relay, and clear in the handler of an executor with the codec.
func TestEncodedPayload(t *testing.T) {
	t.Parallel()
	_, db := newDB(t)
	secret := make([]byte, codec.KeySize)
	_, _ = rand.Read(secret)
	aes, err := codec.NewAESGCM(codec.Key{ID: "k1", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ex := testenv.Executor(t, srv.URL(), executor.Config{Codec: aes})
	got := make(chan string, 1)
	ex.HandleFunc("card.charge", func(_ context.Context, j *executor.Job) (any, error) {
		got <- string(j.Payload)
		return nil, nil
	})
	testenv.Start(t, ex)
	ctx := testenv.Context(t, time.Minute)

	clear := json.RawMessage(`{"card":"4111 1111 1111 1111"}`)
	spec := task.Spec{ID: "charge-1", Type: "card.charge"}
	if spec.Payload, err = codec.EncodePayload(ctx, aes, clear); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Enqueue(ctx, tx, spec); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var body []byte
	if err := db.QueryRowContext(ctx, "SELECT body FROM ax_outbox WHERE task_id = ?", "charge-1").Scan(&body); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(body, []byte("4111")) || !bytes.Contains(body, []byte(`"ax_codec":"aes256gcm"`)) {
		t.Fatalf("outbox row %s: want the encoded payload only", body)
	}

	startRelay(t, db, srv.URL(), outbox.Config{})
	select {
	case p := <-got:
		if p != string(clear) {
			t.Fatalf("handler got %s, want %s", p, clear)
		}
	case <-ctx.Done():
		t.Fatal("the relayed task did not run")
	}
}
