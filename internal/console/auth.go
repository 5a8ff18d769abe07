package console

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Roles a Credential can have.
const (
	// RoleOperator may look and act.
	RoleOperator = "operator"
	// RoleViewer may only look.
	RoleViewer = "viewer"
)

// Credential is a user who can log in: with Name and Secret (the login
// form, or HTTP basic auth), or, when Name is empty, with the Secret alone
// as a token (the form, or "Authorization: Bearer <token>"); a token user
// gives any name at login and is recorded as "<name> (token)".
type Credential struct {
	Name string
	Role string
	// Secret is the password or token, or "sha256:<hex>" of it.
	Secret string
}

func (c Credential) matches(secret string) bool {
	if h, ok := strings.CutPrefix(c.Secret, "sha256:"); ok {
		sum := sha256.Sum256([]byte(secret))
		want, err := hex.DecodeString(h)
		return err == nil && subtle.ConstantTimeCompare(sum[:], want) == 1
	}
	return subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) == 1
}

// ParseCredentials reads a credentials file: one user per line, "name role
// secret" separated by blanks (role operator or viewer; secret the password
// or sha256:<hex>; a name of "-" makes a token user); blank lines and
// lines starting with # are ignored.
func ParseCredentials(r io.Reader) ([]Credential, error) {
	var out []Credential
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("credentials line %d: want \"name role secret\"", n)
		}
		c := Credential{Name: f[0], Role: f[1], Secret: f[2]}
		if c.Name == "-" {
			c.Name = ""
		}
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("credentials line %d: %w", n, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

func (c Credential) validate() error {
	if c.Role != RoleOperator && c.Role != RoleViewer {
		return fmt.Errorf("role %q is not %s or %s", c.Role, RoleOperator, RoleViewer)
	}
	if len(c.Secret) < 8 {
		return errors.New("a secret needs at least 8 characters")
	}
	if strings.ContainsAny(c.Name, ":\n") {
		return fmt.Errorf("name %q contains ':'", c.Name)
	}
	return nil
}

// user is who a request comes from; the zero user is anonymous.
type user struct {
	Name string `json:"n"`
	Role string `json:"r"`
}

func (u user) Operator() bool { return u.Role == RoleOperator }
func (u user) LoggedIn() bool { return u.Role != "" }

const (
	sessionCookie = "ax_console_session"
	csrfCookie    = "ax_console_csrf"
	csrfField     = "csrf"
)

// authenticator checks credentials, signs sessions and CSRF tokens. Its
// key is random per process: a restart logs everybody out.
type authenticator struct {
	creds []Credential
	key   []byte
	ttl   time.Duration
	now   func() time.Time
}

func newAuthenticator(creds []Credential, ttl time.Duration, now func() time.Time) (*authenticator, error) {
	for _, c := range creds {
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("console credential %q: %w", c.Name, err)
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return &authenticator{creds: creds, key: key, ttl: ttl, now: now}, nil
}

// login returns the user that name and secret identify.
func (a *authenticator) login(name, secret string) (user, bool) {
	name = strings.TrimSpace(name)
	if secret == "" {
		return user{}, false
	}
	for _, c := range a.creds {
		if c.Name == "" && c.matches(secret) {
			if name == "" {
				name = c.Role
			}
			return user{Name: cleanName(name) + " (token)", Role: c.Role}, true
		}
		if c.Name != "" && c.Name == name && c.matches(secret) {
			return user{Name: c.Name, Role: c.Role}, true
		}
	}
	return user{}, false
}

// cleanName keeps a typed name printable and short.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func (a *authenticator) mac(parts ...string) string {
	m := hmac.New(sha256.New, a.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

type session struct {
	user
	Exp int64 `json:"e"`
}

func (a *authenticator) sessionValue(u user) string {
	data, _ := json.Marshal(session{user: u, Exp: a.now().Add(a.ttl).Unix()})
	body := base64.RawURLEncoding.EncodeToString(data)
	return body + "." + a.mac("session", body)
}

func (a *authenticator) parseSession(v string) (user, bool) {
	body, sig, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(a.mac("session", body))) {
		return user{}, false
	}
	data, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return user{}, false
	}
	var s session
	if json.Unmarshal(data, &s) != nil || a.now().Unix() > s.Exp || s.Role == "" {
		return user{}, false
	}
	return s.user, true
}

// identify returns the request's user: its session cookie, else its
// Authorization header (basic or bearer), else anonymous.
func (a *authenticator) identify(r *http.Request) user {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if u, ok := a.parseSession(c.Value); ok {
			return u
		}
	}
	if name, pass, ok := r.BasicAuth(); ok {
		if u, ok := a.login(name, pass); ok {
			return u
		}
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if u, ok := a.login("", strings.TrimSpace(tok)); ok {
			return u
		}
	}
	return user{}
}

// csrfToken is the form token of a browser (its CSRF cookie).
func (a *authenticator) csrfToken(cookie string) string { return a.mac("csrf", cookie) }

// checkPost refuses a form post that is not from a page of this console:
// its token must match the browser's CSRF cookie, and a cross-site origin
// is refused outright.
func (a *authenticator) checkPost(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" {
		return errors.New("cross-site form posts are refused")
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return fmt.Errorf("a form posted from %s is refused (this console is %s)", o, r.Host)
		}
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return errors.New("the form has no CSRF cookie: reload the page and try again")
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(a.csrfToken(c.Value))) {
		return errors.New("the form's CSRF token does not match: reload the page and try again")
	}
	return nil
}

// visit is what a handler knows about the request's visitor.
type visit struct {
	User user
	CSRF string
	// CanLogin says whether any credential is configured.
	CanLogin bool
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, v *visit)

// public wraps a handler that anybody may reach (the login page, errors).
func (s *Server) public(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h(w, r, s.begin(w, r))
	}
}

// page wraps a handler of a console page: with RequireLogin, anonymous
// visitors are sent to the login page.
func (s *Server) page(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := s.begin(w, r)
		if s.cfg.RequireLogin && !v.User.LoggedIn() {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.fail(w, r, v, http.StatusUnauthorized, "Login required", "This console needs a login to be viewed.")
			return
		}
		h(w, r, v)
	}
}

// begin sets the security headers, makes sure the browser has a CSRF
// cookie and identifies the visitor.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) *visit {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	v := &visit{User: s.auth.identify(r), CanLogin: len(s.auth.creds) > 0}
	c, err := r.Cookie(csrfCookie)
	val := ""
	if err == nil && len(c.Value) >= 16 {
		val = c.Value
	} else {
		b := make([]byte, 18)
		_, _ = rand.Read(b)
		val = base64.RawURLEncoding.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: val, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		// A form posted with this very response's cookie must still pass.
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: val})
	}
	v.CSRF = s.auth.csrfToken(val)
	return v
}

func (s *Server) handleLoginForm(w http.ResponseWriter, r *http.Request, v *visit) {
	s.render(w, r, v, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request, v *visit) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := s.auth.checkPost(r); err != nil {
		s.fail(w, r, v, http.StatusForbidden, "Form refused", err.Error())
		return
	}
	if !v.CanLogin {
		s.fail(w, r, v, http.StatusForbidden, "No logins configured",
			"This console has no credentials configured, so it is read-only. Set AX_CONSOLE_TOKEN or a credentials file (see ax console --help).")
		return
	}
	u, ok := s.auth.login(r.PostFormValue("name"), r.PostFormValue("secret"))
	next := safeNext(r.PostFormValue("next"))
	if !ok {
		s.render(w, r, v, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "Wrong name or secret."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.auth.sessionValue(u), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(s.cfg.SessionTTL / time.Second)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request, v *visit) {
	if err := s.auth.checkPost(r); err != nil {
		s.fail(w, r, v, http.StatusForbidden, "Form refused", err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) {
		return "/"
	}
	return next
}
