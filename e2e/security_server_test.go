package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/permission"
	"github.com/ax-run/ax/internal/testenv"
)

// secureNATS is a nats-server run from a configuration file the way
// `nats-server -c` runs it — TLS with client certificates required, AX's
// account and users from internal/permission — embedded in the test so
// that its log of permission violations can be read line by line.
type secureNATS struct {
	t         *testing.T
	srv       *server.Server
	url       string
	dir       string
	pki       testenv.PKI
	passwords map[string]string
	log       *violationLog
}

// startSecureNATS writes accounts.conf (acct.Conf()), passwords.conf and a
// server configuration with TLS into dir and starts the server.
func startSecureNATS(t *testing.T, dir string, acct permission.Account) *secureNATS {
	t.Helper()
	accounts, err := acct.Conf()
	if err != nil {
		t.Fatal(err)
	}
	s := &secureNATS{t: t, dir: dir, pki: testenv.NewPKI(t, dir), passwords: map[string]string{}, log: &violationLog{}}
	var pw strings.Builder
	for _, u := range acct.Users {
		s.passwords[u.Name] = "pw-" + u.Name + "-" + fmt.Sprint(time.Now().UnixNano())
		fmt.Fprintf(&pw, "%s: %q\n", permission.PasswordVar(u.Name), s.passwords[u.Name])
		if err := os.WriteFile(filepath.Join(dir, u.Name+".password"), []byte(s.passwords[u.Name]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`listen: 127.0.0.1:-1
max_payload: 8MB
tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
  timeout: 5
}
jetstream {
  store_dir: %q
}
include "accounts.conf"
`, s.pki.ServerCert, s.pki.ServerKey, s.pki.CA, filepath.Join(dir, "jetstream"))
	for name, body := range map[string]string{"accounts.conf": accounts, "passwords.conf": pw.String(), "server.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "server.conf"))
	if err != nil {
		t.Fatalf("nats-server configuration: %v", err)
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetLoggerV2(s.log, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	s.srv = srv
	s.url = "tls://" + srv.Addr().(*net.TCPAddr).String()
	return s
}

// settings are the connection settings of a user: its password file, the
// client certificate, the CA and its inbox prefix.
func (s *secureNATS) settings(user string) natsconn.Settings {
	return natsconn.Settings{URL: s.url, User: user, PasswordFile: filepath.Join(s.dir, user+".password"),
		TLSCert: s.pki.ClientCert, TLSKey: s.pki.ClientKey, TLSCA: s.pki.CA,
		InboxPrefix: permission.User{Name: user}.InboxPrefix()}
}

// args are the same settings as `ax` flags.
func (s *secureNATS) args(user string) []string {
	set := s.settings(user)
	return []string{"--nats", set.URL, "--user", set.User, "--password-file", set.PasswordFile,
		"--tlscert", set.TLSCert, "--tlskey", set.TLSKey, "--tlsca", set.TLSCA, "--inbox-prefix", set.InboxPrefix}
}

// connect connects as user.
func (s *secureNATS) connect(user string) *nats.Conn {
	s.t.Helper()
	nc, err := natsconn.Connect(s.settings(user), nats.Name("e2e-"+user), nats.MaxReconnects(-1))
	if err != nil {
		s.t.Fatalf("connect as %s: %v", user, err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// violations returns the server's permission-violation log lines about
// user ("" for every user).
func (s *secureNATS) violations(user string) []string {
	return s.log.lines(func(l string) bool { return user == "" || strings.Contains(l, `"AX/user:`+user+`"`) })
}

// waitViolation waits for the server to log that user was refused kind
// ("Publish" or "Subscription") on subj.
func (s *secureNATS) waitViolation(user, kind, subj string) {
	s.t.Helper()
	want := fmt.Sprintf(`"AX/user:%s" - %s Violation - Subject %q`, user, kind, subj)
	eventually(s.t, 30*time.Second, "the server to log: "+want, func() (bool, string) {
		return len(s.log.lines(func(l string) bool { return strings.Contains(l, want) })) > 0,
			fmt.Sprintf("%d violations logged", len(s.log.lines(func(string) bool { return true })))
	})
}

// violationLog keeps the server's log lines about permission violations.
type violationLog struct {
	mu  sync.Mutex
	all []string
}

func (l *violationLog) add(format string, v ...any) {
	line := fmt.Sprintf(format, v...)
	if strings.Contains(line, "Violation") {
		l.mu.Lock()
		l.all = append(l.all, line)
		l.mu.Unlock()
	}
}

func (l *violationLog) lines(keep func(string) bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.all {
		if keep(line) {
			out = append(out, line)
		}
	}
	return out
}

func (l *violationLog) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *violationLog) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *violationLog) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *violationLog) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *violationLog) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *violationLog) Tracef(string, ...any)           {}
