package console

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/store"
	"github.com/ax-run/ax/task"
)

func TestNormalizeError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"connection to 10.0.0.12:5432 refused", "connection to <n>.<n>.<n>.<n>:<n> refused"},
		{"order 01M8NZSWQ7MTKX2C7KQRRADY4J not found", "order <id> not found"},
		{"user 3f2b8c1e-9a7d-4c1b-8e2f-0a1b2c3d4e5f missing", "user <id> missing"},
		{`bad value "x-17" in field 'name'`, "bad value <…> in field <…>"},
		{"checksum deadbeefcafe0123 mismatch at 0x7ff", "checksum <hex> mismatch at <hex>"},
		{"  spaced \n\t out  ", "spaced out"},
		{"", "(no error message)"},
	} {
		if got := normalizeError(tc.in); got != tc.want {
			t.Errorf("normalizeError(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if normalizeError("timeout after 3s on shard 4") != normalizeError("timeout after 10s on shard 12") {
		t.Error("errors differing in numbers do not group")
	}
}

func TestParseCredentials(t *testing.T) {
	t.Parallel()
	creds, err := ParseCredentials(strings.NewReader("# users\n\nalice operator alice-secret\n- viewer sha256:" +
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n"))
	if err != nil || len(creds) != 2 || creds[0].Name != "alice" || creds[1].Name != "" || creds[1].Role != RoleViewer {
		t.Fatalf("%+v, %v", creds, err)
	}
	a, err := newAuthenticator(append(creds, Credential{Role: RoleOperator, Secret: "operator-token"}), time.Hour, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, secret string
		ok           bool
		want         user
	}{
		{"alice", "alice-secret", true, user{"alice", RoleOperator}},
		{"alice", "wrong-secret", false, user{}},
		{"bob", "alice-secret", false, user{}},
		{"", "test", true, user{"viewer (token)", RoleViewer}}, // sha256 of "test"
		{"carol", "operator-token", true, user{"carol (token)", RoleOperator}},
		{"carol", "", false, user{}},
	} {
		u, ok := a.login(tc.name, tc.secret)
		if ok != tc.ok || u != tc.want {
			t.Errorf("login(%q, %q) = %+v, %v", tc.name, tc.secret, u, ok)
		}
	}
	// Sessions: a signed value round-trips; a tampered or expired one does not.
	v := a.sessionValue(user{"alice", RoleOperator})
	if u, ok := a.parseSession(v); !ok || u.Name != "alice" {
		t.Fatalf("session round trip: %+v %v", u, ok)
	}
	if _, ok := a.parseSession(strings.Replace(v, ".", "x.", 1)); ok {
		t.Fatal("tampered session accepted")
	}
	later := *a
	later.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, ok := later.parseSession(v); ok {
		t.Fatal("expired session accepted")
	}
	for _, bad := range []string{"alice admin secret-1234", "alice operator short", "too few", "a:b operator secret-1234"} {
		if _, err := ParseCredentials(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseCredentials(%q) accepted", bad)
		}
	}
}

func TestParseSearch(t *testing.T) {
	t.Parallel()
	p, err := parseSearch(url.Values{"type": {"email.send"}, "state": {"failed"}, "priority": {"0"}, "from": {"2026-11-01T10:00"},
		"to": {"2026-11-02T00:00:00Z"}, "sort": {"id"}, "order": {"asc"}, "page": {"3"}, "limit": {"20"}, "error": {"boom"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != "email.send" || p.State != "failed" || p.Priority != 0 || !p.Asc || p.Page != 3 || p.Limit != 20 ||
		!p.From.Equal(time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)) || p.Error != "boom" {
		t.Fatalf("%+v", p)
	}
	// The URL of a search gives the same search back.
	q, err := parseSearch(p.values())
	if err != nil || q.values().Encode() != p.values().Encode() || q.Page != 1 {
		t.Fatalf("round trip: %+v, %v", q, err)
	}
	if p, err := parseSearch(url.Values{}); err != nil || p.Priority != -1 || !p.empty() {
		t.Fatalf("empty search: %+v, %v", p, err)
	}
	for _, bad := range []url.Values{{"priority": {"6"}}, {"priority": {"x"}}, {"state": {"done"}}, {"id": {"a b"}},
		{"prefix": {"a.b"}}, {"type": {".x"}}, {"capability": {"a.b"}}, {"from": {"soon"}}, {"sort": {"x"}},
		{"order": {"sideways"}}, {"page": {"-1"}}, {"limit": {"0"}}, {"error": {strings.Repeat("x", 201)}}} {
		if _, err := parseSearch(bad); err == nil {
			t.Errorf("parseSearch(%v) accepted", bad)
		}
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"/tasks?state=failed": "/tasks?state=failed", "": "/", "//evil.example": "/",
		"https://evil.example": "/", `/\evil`: "/", "tasks": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAttempts(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	ev := func(from, to task.State, s int, mod func(*task.Task)) store.Revisioned {
		tk := task.Task{}
		mod(&tk)
		return store.Revisioned{Event: task.Event{Kind: task.KindTransition, From: from, To: to, At: at(s), Task: tk}}
	}
	claim := func(n int, ex string) func(*task.Task) {
		return func(t *task.Task) { t.Attempt, t.ExecutionID, t.Executor = n, "x"+string(rune('0'+n)), ex }
	}
	h := []store.Revisioned{
		ev("", task.Ready, 0, func(*task.Task) {}),
		ev(task.Ready, task.Running, 1, claim(1, "a")),
		ev(task.Running, task.Retrying, 2, func(t *task.Task) {
			t.Errors = []task.AttemptError{{Attempt: 1, ExecutionID: "x1", Error: "boom"}}
		}),
		ev(task.Retrying, task.Ready, 3, func(*task.Task) {}),
		ev(task.Ready, task.Running, 4, claim(2, "a")),
		ev(task.Running, task.Running, 5, claim(2, "b")), // take-over
		ev(task.Running, task.Succeeded, 7, func(*task.Task) {}),
	}
	got := attempts(h)
	if len(got) != 2 || got[0].Outcome != "failed" || got[0].Error != "boom" || got[0].Duration(at(9)) != time.Second ||
		got[1].Outcome != "succeeded" || got[1].Executor != "b" || got[1].Takeovers != 1 || got[1].Duration(at(9)) != 3*time.Second {
		t.Fatalf("%+v", got)
	}
}
