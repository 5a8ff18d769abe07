package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The CLI connects with the nats CLI's credentials conventions to a server
// that requires a password, and shows no secret when it is refused.
func TestCLIConnectsWithCredentials(t *testing.T) {
	const pass = "cli-Sekrit-pw"
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), Username: "ax", Password: pass,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	url := s.ClientURL()
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg) // no context selected on this machine applies
	for _, k := range []string{"AX_NATS_URL", "NATS_URL", "NATS_CONTEXT", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CREDS", "NATS_NKEY"} {
		t.Setenv(k, "")
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	noSecret := func(what, text string, secrets ...string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("%s shows the secret %q:\n%s", what, sec, text)
			}
		}
	}

	// Password from the environment; `ax topology` creates the streams.
	t.Setenv("NATS_PASSWORD", pass)
	if code, out, errOut := run("topology", "--nats", url, "--user", "ax"); code != 0 || !strings.Contains(out, "AX_TASKS") {
		t.Fatalf("topology with NATS_PASSWORD: exit %d\n%s%s", code, out, errOut)
	}
	_, help, _ := run("status", "--help")
	noSecret("--help", help, pass)
	t.Setenv("NATS_PASSWORD", "")

	// Password from a file, through the SDK client (`ax rejected`).
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run("rejected", "--nats", url, "--user", "ax", "--password-file", pwFile); code != 0 {
		t.Fatalf("rejected with --password-file: exit %d\n%s%s", code, out, errOut)
	}

	// A nats CLI context selected by name.
	ctxDir := filepath.Join(cfg, "nats", "context")
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "ax.json"), []byte(`{"url":"`+url+`","user":"ax","password":"`+pass+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run("topology", "--context", "ax"); code != 0 {
		t.Fatalf("topology --context ax: exit %d\n%s%s", code, out, errOut)
	}

	// Refusals: no credentials, a wrong password in the URL, a wrong one in env.
	code, out, errOut := run("topology", "--nats", url)
	if code == 0 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("no credentials: exit %d\n%s%s", code, out, errOut)
	}
	const wrong = "wrong-Sekrit-42"
	withUser := strings.Replace(url, "nats://", "nats://ax:"+wrong+"@", 1)
	code, out, errOut = run("status", "--nats", withUser)
	if code == 0 || !strings.Contains(errOut, "xxxxx@") {
		t.Errorf("wrong password in the URL: exit %d\n%s%s", code, out, errOut)
	}
	noSecret("error", out+errOut, wrong)
	t.Setenv("NATS_PASSWORD", wrong)
	code, out, errOut = run("topology", "--nats", url, "--user", "ax")
	if code == 0 {
		t.Errorf("wrong password in env: exit 0")
	}
	noSecret("error", out+errOut, wrong)
}
