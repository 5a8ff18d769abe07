package natsconn_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/testenv"
)

// startServer runs an embedded nats-server configured by edit on a random
// loopback port; it is shut down when the test ends.
func startServer(t *testing.T, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true}
	edit(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func hostPort(s *server.Server) string { return s.Addr().(*net.TCPAddr).String() }

// mustWork connects with set, publishes and flushes (so authorisation is
// exercised), and closes.
func mustWork(t *testing.T, set natsconn.Settings) {
	t.Helper()
	nc, err := natsconn.Connect(set, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect with right credentials: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish("ax.test", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// mustFail connects with set, expects a refusal, and checks that none of
// the secrets appears in the error.
func mustFail(t *testing.T, set natsconn.Settings, secrets ...string) error {
	t.Helper()
	nc, err := natsconn.Connect(set, nats.MaxReconnects(0), nats.Timeout(2*time.Second))
	if err == nil {
		nc.Close()
		t.Fatalf("connect with %+v succeeded; want a refusal", redactedSettings(set))
	}
	for _, sec := range secrets {
		if sec != "" && strings.Contains(err.Error(), sec) {
			t.Fatalf("error shows a secret %q: %v", sec, err)
		}
	}
	t.Logf("refused as expected: %v", err)
	return err
}

func redactedSettings(s natsconn.Settings) natsconn.Settings {
	s.Password, s.Token, s.URL = "", "", natsconn.Redact(s.URL)
	return s
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUserPassword(t *testing.T) {
	t.Parallel()
	const pass = "pa55-w0rd-Sekrit"
	s := startServer(t, func(o *server.Options) { o.Username, o.Password = "ax", pass })
	url := "nats://" + hostPort(s)

	mustWork(t, natsconn.Settings{URL: url, User: "ax", Password: pass})
	mustWork(t, natsconn.Settings{URL: url, User: "ax", PasswordFile: writeFile(t, "pw", pass+"\n")})
	mustWork(t, natsconn.Settings{URL: "nats://ax:" + pass + "@" + hostPort(s)})

	err := mustFail(t, natsconn.Settings{URL: url})
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("no credentials: got %v, want an authorization violation", err)
	}
	const wrong = "wrong-Sekrit-99"
	mustFail(t, natsconn.Settings{URL: url, User: "ax", Password: wrong}, wrong)
	err = mustFail(t, natsconn.Settings{URL: "nats://ax:" + wrong + "@" + hostPort(s)}, wrong)
	if !strings.Contains(err.Error(), "nats://xxxxx@"+hostPort(s)) {
		t.Errorf("error does not name the redacted URL: %v", err)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	const token = "t0ken-Sekrit-abc"
	s := startServer(t, func(o *server.Options) { o.Authorization = token })
	url := "nats://" + hostPort(s)

	mustWork(t, natsconn.Settings{URL: url, Token: token})
	mustWork(t, natsconn.Settings{URL: url, TokenFile: writeFile(t, "token", token+"\n")})
	mustFail(t, natsconn.Settings{URL: url})
	mustFail(t, natsconn.Settings{URL: url, Token: "not-" + token}, "not-"+token)
	mustFail(t, natsconn.Settings{URL: "nats://bad-" + token + "@" + hostPort(s)}, "bad-"+token)
}

func TestNkey(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	s := startServer(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	url := "nats://" + hostPort(s)

	mustWork(t, natsconn.Settings{URL: url, NKey: writeFile(t, "user.nk", string(seed)+"\n")})
	mustFail(t, natsconn.Settings{URL: url})
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	mustFail(t, natsconn.Settings{URL: url, NKey: writeFile(t, "other.nk", string(otherSeed))}, string(otherSeed))
}

// TestCredsWithOperator runs the server in operator mode (a trusted
// operator JWT, the account's JWT in a memory resolver) and connects with a
// user credentials file signed by the account.
func TestCredsWithOperator(t *testing.T) {
	t.Parallel()
	opKP, _ := nkeys.CreateOperator()
	opPub, _ := opKP.PublicKey()
	opClaims := jwt.NewOperatorClaims(opPub)
	opJWT, err := opClaims.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	if opClaims, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		t.Fatal(err)
	}
	accKP, _ := nkeys.CreateAccount()
	accPub, _ := accKP.PublicKey()
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(accPub, accJWT); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
		o.AccountResolver = resolver
	})
	url := "nats://" + hostPort(s)

	creds := func(signer nkeys.KeyPair) (path, seed string) {
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		useed, _ := ukp.Seed()
		uc := jwt.NewUserClaims(upub)
		ujwt, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		file, err := jwt.FormatUserConfig(ujwt, useed)
		if err != nil {
			t.Fatal(err)
		}
		return writeFile(t, "user.creds", string(file)), string(useed)
	}
	good, _ := creds(accKP)
	mustWork(t, natsconn.Settings{URL: url, Creds: good})
	mustFail(t, natsconn.Settings{URL: url})
	otherAcc, _ := nkeys.CreateAccount() // an account the operator never signed
	bad, badSeed := creds(otherAcc)
	mustFail(t, natsconn.Settings{URL: url, Creds: bad}, badSeed)
}

func tlsServer(t *testing.T, p testenv.PKI, first bool) *server.Server {
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, func(o *server.Options) {
		o.TLS, o.TLSVerify, o.TLSTimeout = true, true, 5
		o.TLSHandshakeFirst = first
		o.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{cert}, ClientCAs: p.Pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
		}
	})
}

func TestTLSClientCertAndCA(t *testing.T) {
	t.Parallel()
	p := testenv.NewPKI(t, t.TempDir())
	s := tlsServer(t, p, false)
	url := "tls://" + hostPort(s)

	mustWork(t, natsconn.Settings{URL: url, TLSCA: p.CA, TLSCert: p.ClientCert, TLSKey: p.ClientKey})
	// Without the custom CA the server's certificate is not trusted.
	mustFail(t, natsconn.Settings{URL: url, TLSCert: p.ClientCert, TLSKey: p.ClientKey})
	// Without a client certificate the server refuses the handshake.
	mustFail(t, natsconn.Settings{URL: url, TLSCA: p.CA})
	// A certificate from another CA is refused too.
	other := testenv.NewPKI(t, t.TempDir())
	mustFail(t, natsconn.Settings{URL: url, TLSCA: p.CA, TLSCert: other.ClientCert, TLSKey: other.ClientKey})
}

func TestTLSHandshakeFirst(t *testing.T) {
	t.Parallel()
	p := testenv.NewPKI(t, t.TempDir())
	s := tlsServer(t, p, true)
	url := "tls://" + hostPort(s)
	mustWork(t, natsconn.Settings{URL: url, TLSCA: p.CA, TLSCert: p.ClientCert, TLSKey: p.ClientKey, TLSFirst: true})
	mustFail(t, natsconn.Settings{URL: url, TLSCA: p.CA, TLSCert: p.ClientCert, TLSKey: p.ClientKey})
}

// TestContextAgainstServer connects with nothing but a context name: the
// context file holds the URL, the user and a password taken from the
// environment, and the TLS files.
func TestContextAgainstServer(t *testing.T) {
	const pass = "ctx-Sekrit-pw"
	p := testenv.NewPKI(t, t.TempDir())
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(o *server.Options) {
		o.Username, o.Password = "ax", pass
		o.TLS, o.TLSTimeout = true, 5
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	})
	t.Setenv("AX_TEST_CTX_PASSWORD", pass)
	dir := t.TempDir()
	writeContext(t, dir, "prod", `{"url":"tls://`+hostPort(s)+`","user":"ax","password":"env://AX_TEST_CTX_PASSWORD","ca":"`+p.CA+`"}`)
	mustWork(t, natsconn.Settings{ContextDir: dir, Context: "prod"})
	// The selected context applies when none is named.
	if err := os.WriteFile(filepath.Join(dir, "context.txt"), []byte("prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustWork(t, natsconn.Settings{ContextDir: dir})
	// An explicit password overrides the context's, and is not shown.
	mustFail(t, natsconn.Settings{ContextDir: dir, Password: "explicit-Sekrit"}, "explicit-Sekrit", pass)
}

func writeContext(t *testing.T, dir, name, body string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "context", name+".json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
