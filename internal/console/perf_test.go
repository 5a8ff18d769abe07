package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
)

// TestConsoleLargeMirrorLatency reports (it asserts nothing about time) how
// long the MySQL-backed pages take against a large mirror database named by
// AX_CONSOLE_PERF_DSN, e.g. one filled with 1,000,000 tasks as described in
// docs/console.md. Without that variable it skips.
func TestConsoleLargeMirrorLatency(t *testing.T) {
	dsn := os.Getenv("AX_CONSOLE_PERF_DSN")
	if dsn == "" {
		t.Skip("set AX_CONSOLE_PERF_DSN to a filled mirror database to measure page latencies (see docs/console.md)")
	}
	db, err := mirror.Open(dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	s, err := console.New(console.Config{Client: testenv.Client(t, srv.URL()), Auditor: audit.New(db, nil), OverviewTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() {
		hs.Close()
		_ = s.Stop(context.Background())
	}()
	start := time.Now()
	if resp, err := http.Get(hs.URL + "/api/overview"); err == nil {
		resp.Body.Close()
	}
	t.Logf("%-50s first  %6.1f ms (reads the mirror's counts; later ones serve them and refresh in the background)", "/api/overview", float64(time.Since(start).Microseconds())/1000)
	for _, path := range []string{
		"/api/overview",
		"/tasks",
		"/tasks?state=failed",
		"/tasks?state=waiting",
		"/tasks?type=type.t3",
		"/tasks?type=type.t3&state=failed",
		"/tasks?prefix=t-0099",
		"/tasks?id=t-00500000",
		"/tasks?state=failed&error=host+7",
		"/tasks?capability=gpu&priority=1",
		"/tasks?sort=id&page=50",
		"/tasks?state=succeeded&sort=state_since",
		"/tasks?from=2026-11-20T00:00&to=2026-11-21T00:00",
	} {
		var times []time.Duration
		for range 3 {
			start := time.Now()
			resp, err := http.Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if path == "/api/overview" && strings.Contains(string(body), `"errors"`) {
				t.Logf("overview errors: %s", body[strings.Index(string(body), `"errors"`):])
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d", path, resp.StatusCode)
			}
			times = append(times, time.Since(start))
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		t.Logf("%-50s median %6.1f ms", path, float64(times[1].Microseconds())/1000)
	}
}
