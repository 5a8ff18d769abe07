package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestVersion checks ax version against what it reports on: the stamped
// variables win over the build information, the Go version is the
// runtime's and the nats-server is the one go.mod requires (the version
// deploy/ and the images ship).
func TestVersion(t *testing.T) {
	modFile, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github.com/nats-io/nats-server/v2 (v\S+)`).FindSubmatch(modFile)
	if m == nil {
		t.Fatal("go.mod requires no nats-server")
	}
	wantNATS := string(m[1])

	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("ax %s exited %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	var plain buildVersion
	out := run("version", "-o", "json")
	checkJSONContract(t, "version", out)
	if err := json.Unmarshal([]byte(out), &plain); err != nil {
		t.Fatal(err)
	}
	if plain.Go != runtime.Version() || plain.OS != runtime.GOOS || plain.Arch != runtime.GOARCH {
		t.Errorf("go %q %s/%s, want %q %s/%s", plain.Go, plain.OS, plain.Arch, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	if plain.NATSServer != wantNATS {
		t.Errorf("nats_server %q, go.mod requires %s", plain.NATSServer, wantNATS)
	}
	if plain.Version == "" || plain.Commit == "" || plain.Date == "" {
		t.Errorf("empty field in %+v (unknown values print as \"unknown\")", plain)
	}

	// What scripts/build-ax stamps with -ldflags -X.
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	version, commit, date = "v1.2.3", "0123456789abcdef0123456789abcdef01234567", "2026-12-01T10:00:00Z"
	var stamped buildVersion
	if err := json.Unmarshal([]byte(run("version", "-o", "json")), &stamped); err != nil {
		t.Fatal(err)
	}
	if stamped.Version != version || stamped.Commit != commit || stamped.Date != date {
		t.Errorf("stamped %+v, want version %s commit %s date %s", stamped, version, commit, date)
	}
	table := run("version")
	for _, want := range []string{"ax           v1.2.3", "commit       " + commit, "built        " + date,
		"go           " + runtime.Version(), "nats-server  " + wantNATS} {
		if !strings.Contains(table, want) {
			t.Errorf("ax version lacks %q:\n%s", want, table)
		}
	}
}
