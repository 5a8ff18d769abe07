package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	testenv.Orchestrator(t, srv.URL(), orchestrator.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int)
	go func() {
		done <- Run(ctx, []string{"console", "--nats", srv.URL(), "--addr", "127.0.0.1:0", "--log-level", "warn"}, &out, &errOut)
	}()
	var url string
	testenv.Eventually(t, 30*time.Second, "ax console to print its URL", func() bool {
		for _, line := range strings.Split(out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "AX console at "); ok {
				url = strings.Fields(rest)[0]
				return true
			}
		}
		return false
	})
	if !strings.Contains(out.String(), "read-only: set AX_CONSOLE_TOKEN") {
		t.Errorf("no read-only notice:\n%s", out.String())
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Overview") {
		t.Fatalf("GET %s: %d\n%s", url, resp.StatusCode, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("ax console exited %d: %s", code, errOut.String())
	}

	// Off loopback, it refuses to run without credentials.
	var errOut2 bytes.Buffer
	code := Run(context.Background(), []string{"console", "--nats", srv.URL(), "--addr", "0.0.0.0:0"}, io.Discard, &errOut2)
	if code == 0 || !strings.Contains(errOut2.String(), "needs credentials") {
		t.Fatalf("non-loopback without credentials: exit %d: %s", code, errOut2.String())
	}
}
