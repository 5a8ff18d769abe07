package cli

import (
	"os"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/ax-run/ax/internal/natsconn"
)

// addNATSFlags adds the connection flags every command shares, named as
// the nats CLI names them. No secret is a flag default (defaults show in
// --help): the environment is read when a command connects.
func (g *globals) addNATSFlags(pf *pflag.FlagSet) {
	s := &g.nats
	pf.StringVar(&s.URL, "nats", "", "NATS server URL(s), comma-separated (env AX_NATS_URL or NATS_URL; default the context's, else "+DefaultNATSURL+")")
	pf.StringVar(&s.Context, "context", "", "nats CLI context to connect with: a name in ~/.config/nats/context or a .json path (env NATS_CONTEXT; default the selected context)")
	pf.StringVar(&s.Creds, "creds", "", "NATS user credentials file (env NATS_CREDS)")
	pf.StringVar(&s.NKey, "nkey", "", "NATS user nkey seed file (env NATS_NKEY)")
	pf.StringVar(&s.User, "user", "", "NATS user name (env NATS_USER)")
	pf.StringVar(&s.Password, "password", "", "NATS password; prefer env NATS_PASSWORD or --password-file")
	pf.StringVar(&s.PasswordFile, "password-file", "", "file holding the NATS password")
	pf.StringVar(&s.TokenFile, "token-file", "", "file holding the NATS token (or env NATS_TOKEN)")
	pf.StringVar(&s.TLSCert, "tlscert", "", "TLS client certificate (env NATS_CERT)")
	pf.StringVar(&s.TLSKey, "tlskey", "", "TLS client key (env NATS_KEY)")
	pf.StringVar(&s.TLSCA, "tlsca", "", "TLS CA certificates that verify the server (env NATS_CA)")
	pf.BoolVar(&s.TLSFirst, "tlsfirst", false, "TLS handshake before the server's INFO (server option handshake_first; env NATS_TLSFIRST)")
	pf.StringVar(&s.InboxPrefix, "inbox-prefix", "", "prefix of reply inboxes instead of _INBOX, e.g. _INBOX.<user> for a user that may subscribe only to its own (env NATS_INBOX_PREFIX)")
}

// natsConn resolves the connection settings: flags, then env, then the
// nats context; the result is kept for the command's lifetime.
func (g *globals) natsConn() (natsconn.Resolved, error) {
	if g.resolved != nil {
		return *g.resolved, nil
	}
	s := g.nats
	if s.URL == "" {
		s.URL = os.Getenv("AX_NATS_URL")
	}
	s.ApplyEnv(os.Getenv)
	r, err := s.Resolve()
	if err != nil {
		return r, err
	}
	g.resolved = &r
	return r, nil
}

// natsShown is the NATS URL for logs and output, user information redacted.
func (g *globals) natsShown() string {
	r, err := g.natsConn()
	if err != nil {
		return "(invalid NATS settings)"
	}
	return r.RedactedURL()
}

// natsTarget is the URL and the authentication options for code that dials
// by itself (the bench).
func (g *globals) natsTarget() (string, []nats.Option, error) {
	r, err := g.natsConn()
	return r.URL, r.Options, err
}
