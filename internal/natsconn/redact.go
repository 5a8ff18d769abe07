package natsconn

import (
	"net/url"
	"strings"
)

const redacted = "xxxxx"

// Redact returns a server URL list with the user information of each URL
// (nats://user:password@host, nats://token@host) replaced by "xxxxx", so
// it can be logged or shown. It does not need the URLs to be valid.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if scheme, _, rest, ok := splitUserinfo(p); ok {
			parts[i] = scheme + redacted + "@" + rest
		}
	}
	return strings.Join(parts, ",")
}

// splitUserinfo splits one URL "scheme://userinfo@rest" into its user
// information and the rest (scheme keeps "scheme://"); ok is false when it
// has none. A URL without a scheme ("user:pass@host:4222", which nats.go
// accepts) counts as well. The user information ends at the last "@", even
// past a "/", "?" or "#": a password holding one of those must not leak, and
// a NATS URL has no path that could hold an "@".
func splitUserinfo(u string) (scheme, userinfo, rest string, ok bool) {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return "", "", "", false
	}
	// The scheme is a scheme name and "://" before the user information;
	// one after the last "@" is part of the host (":pass@://" hides
	// nothing), and a "://" after anything but a scheme name is part of
	// the user information (":pass@://@", "ax:p://w@h").
	start := 0
	lead := len(u) - len(strings.TrimLeft(u, " \t")) // "a, nats://…"
	if i := strings.Index(u[:at], "://"); i > lead && schemeName(u[lead:i]) {
		start = i + 3
	}
	return u[:start], u[start:at], u[at+1:], true
}

// schemeName reports whether s is a URL scheme name (RFC 3986: a letter,
// then letters, digits, "+", "-" or ".").
func schemeName(s string) bool {
	for i, r := range s {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.')) {
			return false
		}
	}
	return s != ""
}

// urlSecrets lists the secrets held in the user information of urls: the
// whole user information, the password, and both in decoded form.
func urlSecrets(urls string) []string {
	var out []string
	for _, p := range strings.Split(urls, ",") {
		_, ui, _, ok := splitUserinfo(strings.TrimSpace(p))
		if !ok || ui == "" {
			continue
		}
		out = append(out, ui)
		if dec, err := url.PathUnescape(ui); err == nil && dec != ui {
			out = append(out, dec)
		}
		if _, pass, found := strings.Cut(ui, ":"); found && pass != "" {
			out = append(out, pass)
			if dec, err := url.PathUnescape(pass); err == nil && dec != pass {
				out = append(out, dec)
			}
		}
	}
	return out
}

// RedactError returns err with the secrets held in the user information of
// urls replaced by "xxxxx" in its text (for code that dials by itself);
// errors.Is and errors.As still see the original chain.
func RedactError(err error, urls string) error {
	return Resolved{secrets: urlSecrets(urls)}.Scrub(err)
}
