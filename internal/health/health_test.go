package health_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ax-run/ax/internal/health"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/internal/testenv"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadiness follows a component through its life: not ready while it
// starts, ready once started and connected, not ready while its NATS
// server is gone, ready again once it is back. Liveness stays 200
// throughout.
func TestReadiness(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	var checks health.Checks
	checks.Add("nats", health.NATS(nc))
	started := checks.Starting("orchestrator")
	web := httptest.NewServer(checks.Handler(http.NotFoundHandler()))
	t.Cleanup(web.Close)

	live := func() {
		t.Helper()
		if code, body := get(t, web.URL+"/healthz"); code != 200 || body != "ok\n" {
			t.Fatalf("/healthz: %d %q", code, body)
		}
	}
	live()
	code, body := get(t, web.URL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "[+]nats ok\n[-]orchestrator failed: starting\nreadyz check failed") {
		t.Fatalf("/readyz while starting: %d %q", code, body)
	}
	if err := health.Probe(context.Background(), web.URL+"/readyz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Probe while starting: %v", err)
	}
	started()
	if code, body := get(t, web.URL+"/readyz"); code != 200 || body != "[+]nats ok\n[+]orchestrator ok\nok\n" {
		t.Fatalf("/readyz once started: %d %q", code, body)
	}
	if err := health.Probe(context.Background(), web.URL+"/readyz"); err != nil {
		t.Fatal(err)
	}

	// The server goes away: not ready (still alive), then back.
	port := srv.Addr().(*net.TCPAddr).Port
	srv.Shutdown()
	srv.WaitForShutdown()
	testenv.Eventually(t, 10*time.Second, "not ready without NATS", func() bool {
		code, body := get(t, web.URL+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "[-]nats failed: connection ")
	})
	live()
	if err := checks.Ready(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "nats: connection ") {
		t.Fatalf("Ready without NATS: %v", err)
	}
	back, err := natsserver.Start(natsserver.Config{StoreDir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Stop)
	testenv.Eventually(t, 10*time.Second, "ready once NATS is back", func() bool {
		code, _ := get(t, web.URL+"/readyz")
		return code == 200
	})
}

// TestCheckTimeout: a check that hangs is cut at CheckTimeout and the
// others still run.
func TestCheckTimeout(t *testing.T) {
	t.Parallel()
	var checks health.Checks
	checks.Add("hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	checks.Add("fine", func(context.Context) error { return nil })
	res := checks.Check(context.Background())
	if len(res) != 2 || !errors.Is(res[0].Err, context.DeadlineExceeded) || res[1].Err != nil {
		t.Fatalf("results %+v", res)
	}
	var empty health.Checks
	if err := empty.Ready(context.Background()); err != nil {
		t.Fatalf("no checks: %v", err)
	}
}
