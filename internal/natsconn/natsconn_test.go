package natsconn_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/natsconn"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                        "nats://127.0.0.1:4222",
		"nats://ax:s3cret@n1:4222":                     "nats://xxxxx@n1:4222",
		"nats://t0ken@n1:4222":                         "nats://xxxxx@n1:4222",
		"tls://ax:p%40ss@n1:4222,nats://n2:4222":       "tls://xxxxx@n1:4222,nats://n2:4222",
		"nats://a:b@n1:4222, nats://c:d@n2:4222/x?y@z": "nats://xxxxx@n1:4222, nats://xxxxx@z", // the last @ ends the user information
		"nats://ax:pa/ss#x@h:1":                        "nats://xxxxx@h:1",
		"ax:pw@127.0.0.1:4222":                         "xxxxx@127.0.0.1:4222",
		"nats://user:pa@ss@host:1":                     "nats://xxxxx@host:1",
		"":                                             "",
		"not a url at all":                             "not a url at all",
		"ws://u:p@h:80/path":                           "ws://xxxxx@h:80/path",
	} {
		if got := natsconn.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMalformedURLErrorHasNoSecret(t *testing.T) {
	t.Parallel()
	const secret = "Sekrit%41pw"
	_, err := natsconn.Connect(natsconn.Settings{URL: "nats://ax:" + secret + "@127.0.0.1:notaport"}, nats.MaxReconnects(0))
	if err == nil {
		t.Fatal("connect to a malformed URL succeeded")
	}
	for _, s := range []string{secret, "SekritApw", "ax:"} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error shows %q: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "xxxxx") {
		t.Errorf("error does not show the redacted URL: %v", err)
	}
}

func TestResolveChoosesOneAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed.nk")
	creds := filepath.Join(dir, "user.creds")
	for _, p := range []string{seed, creds} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := (natsconn.Settings{Creds: creds, User: "ax", Password: "pw"}).Resolve(); err == nil {
		t.Error("creds and user together were accepted")
	}
	if _, err := (natsconn.Settings{Token: "t", User: "ax"}).Resolve(); err == nil {
		t.Error("token and user together were accepted")
	}
	if _, err := (natsconn.Settings{TLSCert: "c.pem"}).Resolve(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := (natsconn.Settings{Creds: filepath.Join(dir, "missing.creds")}).Resolve(); err == nil {
		t.Error("a missing credentials file was accepted")
	}
	if _, err := (natsconn.Settings{PasswordFile: filepath.Join(dir, "missing")}).Resolve(); err == nil {
		t.Error("a missing password file was accepted")
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := (natsconn.Settings{User: "ax", PasswordFile: empty}).Resolve(); err == nil {
		t.Error("an empty password file was accepted")
	}
	r, err := natsconn.Settings{Creds: creds}.Resolve()
	if err != nil || r.Auth != "creds" || r.URL != natsconn.DefaultURL {
		t.Errorf("creds: %+v, %v", r, err)
	}
	r, err = natsconn.Settings{User: "ax", PasswordFile: writeFile(t, "pw", "from-file\n")}.Resolve()
	if err != nil || r.Auth != "user" {
		t.Errorf("user: %+v, %v", r, err)
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"NATS_URL": "nats://env:4222", "NATS_CONTEXT": "c", "NATS_CREDS": "/c", "NATS_NKEY": "/n",
		"NATS_USER": "u", "NATS_PASSWORD": "p", "NATS_TOKEN": "t", "NATS_CERT": "/cert",
		"NATS_KEY": "/key", "NATS_CA": "/ca", "NATS_TLSFIRST": "true", "NATS_INBOX_PREFIX": "_INBOX.u", "HOME": "/home/ax",
	}
	s := natsconn.Settings{URL: "nats://flag:4222", User: "flag-user"}
	s.ApplyEnv(func(k string) string { return env[k] })
	want := natsconn.Settings{
		URL: "nats://flag:4222", Context: "c", ContextDir: "/home/ax/.config/nats", Creds: "/c", NKey: "/n",
		User: "flag-user", Password: "p", Token: "t", TLSCert: "/cert", TLSKey: "/key", TLSCA: "/ca", TLSFirst: true,
		InboxPrefix: "_INBOX.u",
	}
	if s != want {
		t.Errorf("ApplyEnv:\n got %+v\nwant %+v", s, want)
	}
	s = natsconn.Settings{}
	s.ApplyEnv(func(k string) string { return map[string]string{"XDG_CONFIG_HOME": "/xdg", "HOME": "/h"}[k] })
	if s.ContextDir != "/xdg/nats" {
		t.Errorf("ContextDir = %q, want /xdg/nats", s.ContextDir)
	}
}

func TestContextMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := writeFile(t, "ctx.creds", "x")
	writeContext(t, dir, "creds", `{"url":"nats://ctx:4222","creds":"`+creds+`","ca":"/ca.pem","tls_first":true}`)
	writeContext(t, dir, "jsdomain", `{"url":"nats://ctx:4222","jetstream_domain":"hub"}`)
	writeContext(t, dir, "op", `{"creds":"op://vault/ax"}`)
	writeContext(t, dir, "broken", `{"url":`)

	r, err := natsconn.Settings{ContextDir: dir, Context: "creds"}.Resolve()
	if err != nil || r.URL != "nats://ctx:4222" || r.Auth != "creds" || r.Context != "creds" {
		t.Errorf("context alone: %+v, %v", r, err)
	}
	// Explicit settings win: the URL field by field, the authentication as a whole.
	r, err = natsconn.Settings{ContextDir: dir, Context: "creds", URL: "nats://flag:4222", Token: "tok"}.Resolve()
	if err != nil || r.URL != "nats://flag:4222" || r.Auth != "token" {
		t.Errorf("explicit over context: %+v, %v", r, err)
	}
	// A context given as a path.
	r, err = natsconn.Settings{Context: filepath.Join(dir, "context", "creds.json")}.Resolve()
	if err != nil || r.URL != "nats://ctx:4222" {
		t.Errorf("context by path: %+v, %v", r, err)
	}
	for name, want := range map[string]string{
		"jsdomain": "jetstream_domain", "op": "not supported", "broken": "parse", "missing": "no such file", "../x": "invalid",
	} {
		_, err := natsconn.Settings{ContextDir: dir, Context: name}.Resolve()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("context %s: err %v, want one containing %q", name, err, want)
		}
	}
	// No selected context: nothing is applied.
	r, err = natsconn.Settings{ContextDir: t.TempDir()}.Resolve()
	if err != nil || r.Context != "" || r.URL != natsconn.DefaultURL {
		t.Errorf("no context: %+v, %v", r, err)
	}
}

func TestScrubKeepsChain(t *testing.T) {
	t.Parallel()
	r, err := natsconn.Settings{URL: "nats://ax:hunter2@h:1", Token: ""}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	e := r.Scrub(errors.Join(errors.New("dial nats://ax:hunter2@h:1 failed"), nats.ErrNoServers))
	if strings.Contains(e.Error(), "hunter2") || !errors.Is(e, nats.ErrNoServers) {
		t.Errorf("Scrub = %v (is ErrNoServers: %v)", e, errors.Is(e, nats.ErrNoServers))
	}
}

func TestRedactError(t *testing.T) {
	t.Parallel()
	url := "nats://ax:p%40ssw0rd@h:1"
	err := natsconn.RedactError(errors.New(`parse "nats://ax:p%40ssw0rd@h:1": bad; user ax:p@ssw0rd`), url)
	for _, s := range []string{"p%40ssw0rd", "p@ssw0rd"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("RedactError left %q: %v", s, err)
		}
	}
}

// FuzzRedact builds URLs with a password in them: neither Redact nor the
// error of Resolve may show it, whatever characters it holds.
func FuzzRedact(f *testing.F) {
	for _, s := range [][3]string{
		{"ax", "s3cret", "127.0.0.1:4222"}, {"ax", "pa/ss", "h:1"}, {"ax", "pa#ss", "h:1"}, {"ax", "pa@ss", "h:bad"},
		{"", "tok3n", "h:1"}, {"a,b", "p,w", "h:1"}, {"ax", "p%zz", "h:1"}, {"ax", "p ss", "[::1]:4222"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, user, pass, host string) {
		// Only passwords that can be told from the rest of the text, and
		// URLs that stay one URL (nats.go splits the list at commas).
		if len(pass) < 4 || strings.ContainsAny(user+pass+host, ",") || strings.Contains("nats://"+user+host+"invalid NATS URL xxxxx@"+host, pass) {
			return
		}
		for _, u := range []string{"nats://" + user + ":" + pass + "@" + host, "nats://" + pass + "@" + host, user + ":" + pass + "@" + host} {
			if red := natsconn.Redact(u); strings.Contains(red, pass) {
				t.Fatalf("Redact(%q) = %q shows the password", u, red)
			}
			_, err := natsconn.Settings{URL: u}.Resolve()
			if err != nil && strings.Contains(err.Error(), pass) {
				t.Fatalf("Resolve(%q) error shows the password: %v", u, err)
			}
		}
	})
}
