package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// contextFile is the part of a nats CLI context (nats-io/jsm.go
// natscontext) that AX uses. Fields AX cannot honour make Resolve fail
// rather than connect somewhere else than the context means.
type contextFile struct {
	URL         string `json:"url"`
	Token       string `json:"token"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	TLSFirst    bool   `json:"tls_first"`
	InboxPrefix string `json:"inbox_prefix"`

	NSCLookup   string `json:"nsc"`
	JSDomain    string `json:"jetstream_domain"`
	JSAPIPrefix string `json:"jetstream_api_prefix"`
	SocksProxy  string `json:"socks_proxy"`
	UserJWT     string `json:"user_jwt"`
	WinCertType string `json:"windows_cert_store"`
}

// withContext returns s with the context's settings under its own, and the
// name of the context applied ("" when none).
func (s Settings) withContext() (Settings, string, error) {
	name := s.Context
	var path string
	switch {
	case strings.HasSuffix(name, ".json"):
		path = name
	case name != "":
		if !validContextName(name) {
			return s, "", fmt.Errorf("invalid NATS context name %q", name)
		}
		if s.ContextDir == "" {
			return s, "", fmt.Errorf("NATS context %q: no nats configuration directory (set HOME or XDG_CONFIG_HOME)", name)
		}
		path = filepath.Join(s.ContextDir, "context", name+".json")
	case s.ContextDir != "":
		b, err := os.ReadFile(filepath.Join(s.ContextDir, "context.txt"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return s, "", nil
			}
			return s, "", fmt.Errorf("read selected NATS context: %w", err)
		}
		name = strings.TrimSpace(string(b))
		if name == "" {
			return s, "", nil
		}
		if !validContextName(name) {
			return s, "", fmt.Errorf("invalid NATS context name %q in context.txt", name)
		}
		path = filepath.Join(s.ContextDir, "context", name+".json")
	default:
		return s, "", nil
	}
	cf, err := readContext(path)
	if err != nil {
		return s, "", fmt.Errorf("NATS context %q: %w", name, err)
	}
	out, err := s.merge(cf)
	if err != nil {
		return s, "", fmt.Errorf("NATS context %q: %w", name, err)
	}
	return out, name, nil
}

func readContext(path string) (contextFile, error) {
	var cf contextFile
	b, err := os.ReadFile(path)
	if err != nil {
		return cf, err
	}
	if err := json.Unmarshal(b, &cf); err != nil {
		// The JSON error names an offset, never the file's text.
		return cf, fmt.Errorf("parse %s: %w", path, err)
	}
	for field, v := range map[string]string{
		"nsc": cf.NSCLookup, "jetstream_domain": cf.JSDomain, "jetstream_api_prefix": cf.JSAPIPrefix,
		"socks_proxy": cf.SocksProxy, "user_jwt": cf.UserJWT, "windows_cert_store": cf.WinCertType,
	} {
		if v != "" {
			return cf, fmt.Errorf("%s: ax does not support the context setting %q (use a context without it)", path, field)
		}
	}
	return cf, nil
}

// merge puts the context cf under s: the URL, TLS files and inbox prefix
// field by field; the authentication as a whole, only when s names none.
func (s Settings) merge(cf contextFile) (Settings, error) {
	var err error
	str := func(dst *string, v string, file bool) {
		if *dst != "" || v == "" || err != nil {
			return
		}
		if file {
			v, err = contextPath(v)
		} else {
			v, err = contextSecret(v)
		}
		*dst = v
	}
	str(&s.URL, cf.URL, false)
	str(&s.TLSCert, cf.Cert, true)
	str(&s.TLSKey, cf.Key, true)
	str(&s.TLSCA, cf.CA, true)
	str(&s.InboxPrefix, cf.InboxPrefix, false)
	s.TLSFirst = s.TLSFirst || cf.TLSFirst
	if s.Creds == "" && s.NKey == "" && s.User == "" && s.Token == "" && s.TokenFile == "" {
		// The nats CLI's order: user, creds, nkey, then a token.
		switch {
		case cf.User != "":
			str(&s.User, cf.User, false)
			if s.PasswordFile == "" {
				str(&s.Password, cf.Password, false)
			}
		case cf.Creds != "":
			str(&s.Creds, cf.Creds, true)
		case cf.NKey != "":
			str(&s.NKey, cf.NKey, true)
		case cf.Token != "":
			str(&s.Token, cf.Token, false)
		}
	}
	return s, err
}

// contextPath expands a context's file reference as the nats CLI does
// ($VARS, a leading ~, a file:// URI); other schemes (op://, nsc://) are
// not supported.
func contextPath(v string) (string, error) {
	if strings.HasPrefix(v, "file://") {
		v = strings.TrimPrefix(v, "file://")
	} else if i := strings.Index(v, "://"); i > 0 && !strings.ContainsAny(v[:i], `/\`) {
		return "", fmt.Errorf("file reference scheme %q is not supported (give a path)", v[:i])
	}
	v = os.ExpandEnv(v)
	if strings.HasPrefix(v, "~") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("expand %s: %w", v, err)
		}
		v = home + v[1:]
	}
	return v, nil
}

// contextSecret resolves a context's literal value; "env://NAME" reads the
// variable NAME (as natscontext's env resolver does).
func contextSecret(v string) (string, error) {
	if name, ok := strings.CutPrefix(v, "env://"); ok {
		val := os.Getenv(name)
		if val == "" {
			return "", fmt.Errorf("environment variable %s named by the context is empty", name)
		}
		return val, nil
	}
	return v, nil
}

func validContextName(name string) bool {
	return name != "" && !strings.Contains(name, "..") && !strings.ContainsAny(name, `/\`)
}

// ContextPath is where the context named name (or the path of a context
// file ending in ".json") lives in the nats CLI's configuration directory
// dir (Settings.ContextDir): dir/context/<name>.json.
func ContextPath(dir, name string) (string, error) {
	if strings.HasSuffix(name, ".json") {
		return name, nil
	}
	if !validContextName(name) {
		return "", fmt.Errorf("invalid NATS context name %q", name)
	}
	if dir == "" {
		return "", fmt.Errorf("NATS context %q: no nats configuration directory (set HOME or XDG_CONFIG_HOME)", name)
	}
	return filepath.Join(dir, "context", name+".json"), nil
}

// SaveContext writes a nats CLI context holding only a server URL (and a
// description) at path, creating its directory: what `ax dev` leaves for
// the other commands (`--context ax-dev`) and the nats CLI. It does not
// select it.
func SaveContext(path, description, url string) error {
	b, err := json.MarshalIndent(map[string]string{"description": description, "url": url}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save NATS context: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("save NATS context: %w", err)
	}
	return nil
}
