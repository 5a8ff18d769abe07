// Package natsconn turns the connection settings of an `ax` command — a
// server URL, credentials and TLS files, or a `nats` CLI context — into a
// NATS connection, in the conventions of the `nats` CLI:
//
//   - credentials file (--creds, NATS_CREDS), nkey seed file (--nkey,
//     NATS_NKEY), user and password (--user/--password, NATS_USER and
//     NATS_PASSWORD, or --password-file), token (NATS_TOKEN or
//     --token-file);
//   - TLS with a client certificate and key and a custom CA (--tlscert,
//     --tlskey, --tlsca; NATS_CERT, NATS_KEY, NATS_CA) and the TLS
//     handshake first (--tlsfirst);
//   - a custom prefix of reply inboxes (--inbox-prefix, NATS_INBOX_PREFIX),
//     so that a user allowed to subscribe only to its own inboxes
//     (_INBOX.<user>.>) can make requests and read JetStream;
//   - contexts: --context NAME (NATS_CONTEXT) reads
//     $XDG_CONFIG_HOME/nats/context/NAME.json (default ~/.config/nats), the
//     file `nats context save` writes; without a name the context selected
//     with `nats context select` (nats/context.txt) is used, as the nats CLI
//     does. Explicit settings override the context's.
//
// Secrets never leave this package in text: Redact removes the user
// information of URLs, and the errors of Connect have every secret it knew
// of (a password, a token, a URL's user information) replaced by "xxxxx".
// The package reads no environment and no flags itself: the caller hands
// them in (Settings.ApplyEnv takes a getenv function).
package natsconn

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// DefaultURL is the server used when neither the settings nor a context
// name one.
const DefaultURL = nats.DefaultURL

// Settings say where NATS is and how to authenticate. The zero value
// connects to DefaultURL without credentials (and with the selected nats
// context, if ContextDir holds one).
type Settings struct {
	// URL is one server URL or a comma-separated list. Default: the
	// context's url, else DefaultURL. User information in it
	// (nats://user:pass@host, nats://token@host) works but is discouraged:
	// it is redacted from every message.
	URL string
	// Context names a nats CLI context (a file NAME.json in
	// ContextDir/context), or is the path of a context file ending in
	// ".json". Empty: the context selected in ContextDir/context.txt, if any.
	Context string
	// ContextDir is the nats CLI's configuration directory
	// ($XDG_CONFIG_HOME/nats or ~/.config/nats). Empty: contexts are only
	// read when Context is a path.
	ContextDir string

	// Creds is the path of a credentials file (user JWT and nkey seed).
	Creds string
	// NKey is the path of a file holding a user nkey seed.
	NKey string
	// User and Password authenticate with a user name and password.
	User     string
	Password string
	// PasswordFile is read for the password when Password is empty.
	PasswordFile string
	// Token authenticates with a token.
	Token string
	// TokenFile is read for the token when Token is empty.
	TokenFile string

	// TLSCert and TLSKey are the client certificate and its key (PEM files).
	TLSCert string
	TLSKey  string
	// TLSCA is a PEM file of the CAs that verify the server.
	TLSCA string
	// TLSFirst does the TLS handshake before the server's INFO (the server
	// needs handshake_first).
	TLSFirst bool
	// InboxPrefix replaces "_INBOX" in the connection's reply inboxes (a
	// context's inbox_prefix). A user whose permissions let it subscribe
	// only to its own inboxes needs it (deploy/security: "_INBOX.<user>").
	InboxPrefix string
}

// ApplyEnv fills every empty field from the environment variables the nats
// CLI reads (NATS_URL, NATS_CONTEXT, NATS_CREDS, NATS_NKEY, NATS_USER,
// NATS_PASSWORD, NATS_TOKEN, NATS_CERT, NATS_KEY, NATS_CA, NATS_TLSFIRST,
// NATS_INBOX_PREFIX)
// and ContextDir from XDG_CONFIG_HOME or HOME. getenv is usually os.Getenv.
func (s *Settings) ApplyEnv(getenv func(string) string) {
	fill := func(dst *string, key string) {
		if *dst == "" {
			*dst = getenv(key)
		}
	}
	fill(&s.URL, "NATS_URL")
	fill(&s.Context, "NATS_CONTEXT")
	fill(&s.Creds, "NATS_CREDS")
	fill(&s.NKey, "NATS_NKEY")
	fill(&s.User, "NATS_USER")
	fill(&s.Password, "NATS_PASSWORD")
	fill(&s.Token, "NATS_TOKEN")
	fill(&s.TLSCert, "NATS_CERT")
	fill(&s.TLSKey, "NATS_KEY")
	fill(&s.TLSCA, "NATS_CA")
	fill(&s.InboxPrefix, "NATS_INBOX_PREFIX")
	if !s.TLSFirst {
		switch strings.ToLower(getenv("NATS_TLSFIRST")) {
		case "1", "true", "yes":
			s.TLSFirst = true
		}
	}
	if s.ContextDir == "" {
		if x := getenv("XDG_CONFIG_HOME"); x != "" {
			s.ContextDir = x + "/nats"
		} else if h := getenv("HOME"); h != "" {
			s.ContextDir = h + "/.config/nats"
		}
	}
}

// Resolved is what Resolve makes of Settings: the URL to dial and the
// options that carry the credentials and TLS settings.
type Resolved struct {
	// URL is the server URL list to dial (may hold user information: show
	// it only through Redact).
	URL string
	// Options authenticate and configure TLS.
	Options []nats.Option
	// Context is the name of the context that was applied, if any.
	Context string
	// Auth names the authentication used: "creds", "nkey", "user",
	// "token" or "none" (for logs; never a secret).
	Auth string

	secrets []string
}

// Resolve applies the context (if any) under the explicit settings, reads
// the password and token files, and returns the URL and options. An
// explicit authentication (creds, nkey, user or token) replaces the
// context's; more than one explicit kind is an error.
func (s Settings) Resolve() (Resolved, error) {
	eff, ctxName, err := s.withContext()
	if err != nil {
		return Resolved{}, err
	}
	if eff.Password == "" && eff.PasswordFile != "" {
		if eff.Password, err = readSecretFile(eff.PasswordFile); err != nil {
			return Resolved{}, fmt.Errorf("read password file: %w", err)
		}
	}
	if eff.Token == "" && eff.TokenFile != "" {
		if eff.Token, err = readSecretFile(eff.TokenFile); err != nil {
			return Resolved{}, fmt.Errorf("read token file: %w", err)
		}
	}
	r := Resolved{URL: eff.URL, Context: ctxName, Auth: "none"}
	if r.URL == "" {
		r.URL = DefaultURL
	}
	if err := checkURLs(r.URL); err != nil {
		return Resolved{}, err
	}
	r.secrets = append(r.secrets, eff.Password, eff.Token)
	r.secrets = append(r.secrets, urlSecrets(r.URL)...)

	kinds := 0
	for _, set := range []bool{eff.Creds != "", eff.NKey != "", eff.User != "", eff.Token != ""} {
		if set {
			kinds++
		}
	}
	if kinds > 1 {
		return Resolved{}, errors.New("more than one NATS authentication given: choose one of creds, nkey, user/password and token")
	}
	switch {
	case eff.Creds != "":
		if _, err := os.Stat(eff.Creds); err != nil {
			return Resolved{}, fmt.Errorf("credentials file: %w", err)
		}
		r.Options = append(r.Options, nats.UserCredentials(eff.Creds))
		r.Auth = "creds"
	case eff.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(eff.NKey)
		if err != nil {
			return Resolved{}, fmt.Errorf("nkey seed file %s: %w", eff.NKey, err)
		}
		r.Options = append(r.Options, opt)
		r.Auth = "nkey"
	case eff.User != "":
		r.Options = append(r.Options, nats.UserInfo(eff.User, eff.Password))
		r.Auth = "user"
	case eff.Token != "":
		r.Options = append(r.Options, nats.Token(eff.Token))
		r.Auth = "token"
	}

	switch {
	case eff.TLSCert != "" && eff.TLSKey != "":
		r.Options = append(r.Options, nats.ClientCert(eff.TLSCert, eff.TLSKey))
	case eff.TLSCert != "" || eff.TLSKey != "":
		return Resolved{}, errors.New("a TLS client certificate needs both --tlscert and --tlskey")
	}
	if eff.TLSCA != "" {
		r.Options = append(r.Options, nats.RootCAs(eff.TLSCA))
	}
	if eff.TLSFirst {
		r.Options = append(r.Options, nats.TLSHandshakeFirst())
	}
	if eff.InboxPrefix != "" {
		r.Options = append(r.Options, nats.CustomInboxPrefix(eff.InboxPrefix))
	}
	return r, nil
}

// Connect resolves s and dials it with opts appended (name, reconnect
// policy…). Its error names the redacted URL and holds no secret.
func Connect(s Settings, opts ...nats.Option) (*nats.Conn, error) {
	r, err := s.Resolve()
	if err != nil {
		return nil, err
	}
	return r.Connect(opts...)
}

// Connect dials the resolved URL with its options and opts appended.
func (r Resolved) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(r.URL, append(append([]nats.Option{}, r.Options...), opts...)...)
	if err != nil {
		return nil, r.Scrub(fmt.Errorf("connect to NATS at %s: %w", Redact(r.URL), err))
	}
	return nc, nil
}

// RedactedURL is the URL with its user information replaced.
func (r Resolved) RedactedURL() string { return Redact(r.URL) }

// Scrub returns err with every secret r knows of replaced by "xxxxx" in
// its text; errors.Is and errors.As still see the original chain.
func (r Resolved) Scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := scrub(err.Error(), r.secrets)
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

func scrub(s string, secrets []string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, redacted)
		}
	}
	return s
}

// checkURLs parses each URL as nats.go will, so that a malformed one is
// reported here: url.Parse's own error quotes the URL, and a URL cut short
// at a "#" or "/" in its password would quote part of that password.
func checkURLs(urls string) error {
	for _, p := range strings.Split(urls, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		if _, err := url.Parse(p); err != nil {
			if _, _, _, secret := splitUserinfo(p); secret {
				return fmt.Errorf("invalid NATS URL %s", Redact(p))
			}
			return fmt.Errorf("invalid NATS URL: %w", err)
		}
	}
	return nil
}

func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}
