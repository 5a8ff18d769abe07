package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/task"
)

// TestCodecKeyFile: `ax submit --codec-key-file` encrypts the payload and
// `ax worker` with the same file decrypts it for the demo handler; AX
// stores only the envelope. A bad key file is refused with a clear error.
func TestCodecKeyFile(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("# test keys\nk1 "+base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workerDone := make(chan int, 1)
	var workerErr syncBuffer
	go func() {
		workerDone <- Run(ctx, []string{"worker", "--nats", srv.URL(), "--codec-key-file", keys, "--log-level", "warn"}, &syncBuffer{}, &workerErr)
	}()

	var out, errOut bytes.Buffer
	if code := Run(testenv.Context(t, time.Minute), []string{"submit", demo.TypeSleep, "--id", "sealed", "--payload", `{"label":"LABEL-IN-CLEAR","sleep":"1ms"}`,
		"--codec-key-file", keys, "--wait", "--nats", srv.URL()}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "sealed\tsucceeded") {
		t.Fatalf("ax submit --codec-key-file --wait: exit %d: %s%s", code, out.String(), errOut.String())
	}
	c := testenv.Client(t, srv.URL())
	got, err := c.Get(testenv.Context(t, time.Minute), "sealed")
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal(got.Payload, &env); err != nil || env["ax_codec"] != "aes256gcm" || env["key"] != "k1" || bytes.Contains(got.Payload, []byte("LABEL-IN-CLEAR")) {
		t.Fatalf("stored payload %s is not an envelope", got.Payload)
	}
	// The demo handler read the label from the decoded payload (results
	// are not encoded).
	if got.State != task.Succeeded || !strings.Contains(string(got.Result), `"label":"LABEL-IN-CLEAR"`) {
		t.Fatalf("task %s, result %s: the worker did not decode the payload", got.State, got.Result)
	}

	for _, bad := range []struct{ content, says string }{
		{"k1 tooshort\n", "codec key file"},
		{"", "holds no key"},
	} {
		f := filepath.Join(t.TempDir(), "bad")
		_ = os.WriteFile(f, []byte(bad.content), 0o600)
		out.Reset()
		errOut.Reset()
		if code := Run(testenv.Context(t, time.Minute), []string{"submit", demo.TypeNoop, "--payload", `{}`, "--codec-key-file", f, "--nats", srv.URL()}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), bad.says) {
			t.Errorf("ax submit with key file %q: exit %d: %s%s", bad.content, code, out.String(), errOut.String())
		}
	}
	cancel()
	if code := <-workerDone; code != 0 {
		t.Errorf("ax worker exited %d: %s", code, workerErr.String())
	}
}
