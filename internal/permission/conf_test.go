package permission_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"golang.org/x/crypto/bcrypt"

	"github.com/ax-run/ax/internal/permission"
	"github.com/ax-run/ax/internal/testenv"
)

const securityDir = "../../deploy/security/"

// deploy/security/accounts.conf is what `ax nats-accounts` prints.
func TestSampleFileIsGenerated(t *testing.T) {
	want, err := permission.Sample().Conf()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(securityDir + "accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("deploy/security/accounts.conf is not Sample().Conf(): regenerate it with `go run ./cmd/ax nats-accounts > deploy/security/accounts.conf`")
	}
}

// The sample server configuration, with its paths pointed at a temporary
// directory, certificates made for the test and bcrypt hashes in
// passwords.conf, loads and runs: each user connects over TLS with its
// password and is held to its rights; a client without a certificate or
// without a password is refused.
func TestSampleServerConf(t *testing.T) {
	dir := t.TempDir()
	testenv.NewPKI(t, dir) // ca.pem, server.pem, client.pem and their keys

	conf, err := os.ReadFile(securityDir + "nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer("/etc/nats/", dir+"/", "/var/lib/ax/nats", filepath.Join(dir, "js"),
		"0.0.0.0:4222", "127.0.0.1:-1", "127.0.0.1:8222", "127.0.0.1:-1").Replace(string(conf))
	write(t, dir, "nats-server.conf", text)
	accounts, err := os.ReadFile(securityDir + "accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, "accounts.conf", string(accounts))
	example, err := os.ReadFile(securityDir + "passwords.conf.example")
	if err != nil {
		t.Fatal(err)
	}
	var pw strings.Builder
	for _, line := range strings.Split(string(example), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		h, err := bcrypt.GenerateFromPassword([]byte("secret-"+name), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&pw, "%s: %q\n", name, h)
	}
	for _, u := range permission.Sample().Users {
		if !strings.Contains(pw.String(), permission.PasswordVar(u.Name)+":") {
			t.Errorf("passwords.conf.example has no %s", permission.PasswordVar(u.Name))
		}
	}
	write(t, dir, "passwords.conf", pw.String())

	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats-server.conf"))
	if err != nil {
		t.Fatalf("sample configuration: %v", err)
	}
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	url := "tls://" + s.Addr().(*net.TCPAddr).String()
	tlsOpts := []nats.Option{nats.RootCAs(filepath.Join(dir, "ca.pem")), nats.ClientCert(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")), nats.MaxReconnects(0)}

	for _, u := range permission.Sample().Users {
		errs := make(chan error, 4)
		opts := append([]nats.Option{nats.UserInfo(u.Name, "secret-"+permission.PasswordVar(u.Name)),
			nats.CustomInboxPrefix(u.InboxPrefix()),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })}, tlsOpts...)
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		// Everybody may subscribe to its own inboxes; only the
		// orchestrator may write a record.
		if _, err := nc.SubscribeSync(u.InboxPrefix() + ".x"); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish("ax.task.x", nil); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// The server answers the publish before the flush's PONG; the
		// error handler runs on its own goroutine soon after.
		wait := 30 * time.Second
		if u.Role == permission.Orchestrator {
			wait = 200 * time.Millisecond // expecting nothing
		}
		select {
		case err := <-errs:
			if u.Role == permission.Orchestrator || !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "ax.task.x") {
				t.Errorf("%s publishing ax.task.x: %v", u.Name, err)
			}
		case <-time.After(wait):
			if u.Role != permission.Orchestrator {
				t.Errorf("%s published ax.task.x unrefused", u.Name)
			}
		}
		nc.Close()
	}
	if nc, err := nats.Connect(url, tlsOpts...); err == nil {
		nc.Close()
		t.Error("a client without a password connected")
	}
	if nc, err := nats.Connect(url, nats.UserInfo("producer", "secret-"+permission.PasswordVar("producer")),
		nats.RootCAs(filepath.Join(dir, "ca.pem")), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a client without a certificate connected")
	}
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
