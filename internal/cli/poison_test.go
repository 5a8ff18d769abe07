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

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// `ax poison list` shows what an orchestrator could not apply, and `ax
// poison redrive` hands it back: a submission kept as poison runs once
// re-driven.
func TestPoisonListAndRedrive(t *testing.T) {
	t.Parallel()
	srv, _, c := testenv.Stack(t, orchestrator.Config{}, executor.Config{})
	ctx := testenv.Context(t, time.Minute)
	js, _ := jetstream.New(c.Conn())
	poison := nats.NewMsg(subject.Poison("ax-orchestrator-submit", 7))
	poison.Data = []byte(`{"id":"was-poison","type":"ok"}`)
	poison.Header.Set(subject.HeaderPoisonSubject, subject.Submit("ok"))
	poison.Header.Set(subject.HeaderPoisonReason, "JetStream unavailable")
	poison.Header.Set(subject.HeaderPoisonDeliveries, "50")
	if _, err := js.PublishMsg(ctx, poison); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), append(args, "--nats", srv.URL()), &out, &errOut); code != 0 {
			t.Fatalf("ax %v exited %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	var entries []poisonEntry
	if err := json.Unmarshal([]byte(run("poison", "list", "-o", "json")), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Original != subject.Submit("ok") || entries[0].Reason != "JetStream unavailable" || entries[0].Deliveries != "50" {
		t.Fatalf("poison list: %+v", entries)
	}
	if out := run("poison", "redrive", "--all", "-o", "json"); strings.TrimSpace(out) != "{\n  \"redriven\": [\n    1\n  ]\n}" {
		t.Fatalf("redrive -o json: %s", out)
	}
	if got, err := c.Wait(ctx, "was-poison"); err != nil || got.State != task.Succeeded {
		t.Fatalf("re-driven submission: %v", err)
	}
	if out := run("poison", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("poison left after re-drive: %s", out)
	}
}
