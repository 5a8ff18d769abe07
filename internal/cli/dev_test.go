package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDevDemoRunsToTheEnd runs the README's first command (with --exit).
func TestDevDemoRunsToTheEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, []string{"dev", "--exit", "--port", "0", "--store", t.TempDir(), "--log-level", "warn", "--metrics-addr", "127.0.0.1:0"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("ax dev exited %d\n%s\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{"All 34 tasks ended", "-flaky ", "-split ", "attempt 3 succeeded", "retries exhausted after 4 attempts",
		"upstream demo-", "demo over: no executor has capability quantum", "ax dlq redrive", "  metrics at http://127.0.0.1:", "/metrics (Prometheus"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Count(s, " succeeded ") < 31 {
		t.Errorf("fewer than 31 tasks succeeded:\n%s", s)
	}
}
