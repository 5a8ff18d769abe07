package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/internal/testenv"
)

// TestDevDemoRunsToTheEnd runs the README's first command, then the
// commands it prints to inspect the demo while it keeps running, through
// the nats context it saved.
func TestDevDemoRunsToTheEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	devCtx, stopDev := context.WithCancel(ctx)
	saved := filepath.Join(t.TempDir(), "ax-dev.json")
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(devCtx, []string{"dev", "--port", "0", "--store", t.TempDir(), "--log-level", "warn", "--metrics-addr", "127.0.0.1:0",
			"--console-addr", "off", "--save-context", saved}, &out, &errOut)
	}()
	testenv.Eventually(t, 90*time.Second, "the demo's summary", func() bool {
		select {
		case code := <-done:
			t.Fatalf("ax dev exited %d\n%s\n%s", code, out.String(), errOut.String())
		default:
		}
		return strings.Contains(out.String(), "The server, orchestrator and executors keep running")
	})
	s := out.String()
	for _, want := range []string{"All 34 tasks ended", "-flaky ", "-split ", "attempt 3 succeeded", "retries exhausted after 4 attempts",
		"upstream demo-", "demo over: no executor has capability quantum", "ax dlq redrive", "  metrics at http://127.0.0.1:", "/metrics (Prometheus",
		"saved as nats context " + saved, "ax workers --context " + saved} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, " succeeded ") < 31 {
		t.Errorf("fewer than 31 tasks succeeded:\n%s", s)
	}
	// The saved context names the demo's server.
	url := regexp.MustCompile(`embedded NATS with JetStream at (\S+)`).FindStringSubmatch(s)
	b, err := os.ReadFile(saved)
	if url == nil || err != nil || !strings.Contains(string(b), `"url": "`+url[1]+`"`) {
		t.Fatalf("saved context %s: %s (%v); want the URL %v", saved, b, err, url)
	}
	// Every "Inspect" line runs as printed.
	for _, line := range regexp.MustCompile(`(?m)^  (ax [^#\n]*?)\s*(#.*)?$`).FindAllStringSubmatch(s[strings.Index(s, "Inspect"):], -1) {
		args := strings.Fields(line[1])[1:]
		var o, e bytes.Buffer
		if code := Run(ctx, args, &o, &e); code != 0 {
			t.Errorf("%s: exited %d: %s%s", line[1], code, e.String(), o.String())
		}
		if args[0] == "workers" && (!strings.Contains(o.String(), "executor-cpu") || !strings.Contains(o.String(), "executor-gpu")) {
			t.Errorf("%s:\n%s", line[1], o.String())
		}
	}
	stopDev()
	if code := <-done; code != 0 {
		t.Fatalf("ax dev exited %d: %s", code, errOut.String())
	}
}

// One default NATS address: ax dev and ax server listen where every other
// command and the SDK connect by default.
func TestOneDefaultNATSAddress(t *testing.T) {
	t.Parallel()
	if DefaultNATSURL != natsconn.DefaultURL {
		t.Errorf("the CLI's default %s is not natsconn's %s", DefaultNATSURL, natsconn.DefaultURL)
	}
	port := strings.TrimPrefix(DefaultNATSURL, "nats://127.0.0.1:")
	for _, c := range commands(&globals{}) {
		if c.Name() != "dev" && c.Name() != "server" {
			continue
		}
		if got := c.Flags().Lookup("port").DefValue; got != port {
			t.Errorf("ax %s listens on port %s by default; every other command connects to %s", c.Name(), got, DefaultNATSURL)
		}
	}
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("default URL %s", DefaultNATSURL)
	}
}

// A command pointed at a NATS server without AX's streams says which
// server it asked.
func TestMissingStreamsNameTheServer(t *testing.T) {
	t.Parallel()
	srv := testenv.BareNATS(t)
	ctx := testenv.Context(t, time.Minute)
	var out, errOut bytes.Buffer
	if code := Run(ctx, []string{"workers", "--nats", srv.URL()}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d", code)
	}
	if msg := errOut.String(); !strings.Contains(msg, "AX's streams do not exist") || !strings.Contains(msg, srv.URL()) {
		t.Errorf("error does not name the server %s: %s", srv.URL(), msg)
	}
}
