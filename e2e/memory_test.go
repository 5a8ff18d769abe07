package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/task"
)

// TestOrchestratorMemoryIsBoundedByConfig measures the orchestrator's
// resident memory (its own process) with n and then 2n tasks of 256 KiB
// payloads queued for a capability nobody serves (n = AX_MEMORY_TASKS,
// default 2,000; skipped unless AX_MEMORY_TASKS or AX_LONG is set: it
// writes several GiB). Doubling the queued bytes must not grow it: what the
// orchestrator holds is bounded by configuration — the dispatch cache
// (--dispatch-cache-bytes, 64 MiB), the pull buffers (by bytes) and the
// handlers in flight (--workers × a few copies of a payload) — not by the
// backlog.
func TestOrchestratorMemoryIsBoundedByConfig(t *testing.T) {
	n := 2000
	if v := os.Getenv("AX_MEMORY_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	} else if os.Getenv("AX_LONG") == "" {
		t.Skip("writes several GiB: set AX_MEMORY_TASKS=<n> or AX_LONG=1")
	}
	const payload = 256 << 10
	one := queuedRSS(t, n, payload)
	two := queuedRSS(t, 2*n, payload)
	t.Logf("orchestrator RSS with 256 KiB payloads queued: %d MiB for %d tasks (%d MiB of payloads), %d MiB for %d tasks (%d MiB)",
		one>>20, n, (int64(n)*payload)>>20, two>>20, 2*n, (int64(2*n)*payload)>>20)
	if grew := two - one; grew > 64<<20 {
		t.Fatalf("RSS grew by %d MiB when the queued payloads grew by %d MiB: memory follows the backlog", grew>>20, (int64(n)*payload)>>20)
	}
}

// queuedRSS runs a server and an orchestrator process, queues n tasks of
// payload bytes for a capability nobody serves, and returns the
// orchestrator's resident memory once all are dispatched.
func queuedRSS(t *testing.T, n, payload int) int64 {
	c := newCluster(t)
	c.startServer()
	orch := c.startOrchestrator("mem-orch")
	_, cl := c.connect()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	body := []byte(`"` + strings.Repeat("x", payload-2) + `"`)
	const chunk = 50
	for sent := 0; sent < n; sent += chunk {
		var specs []task.Spec
		for i := sent; i < min(sent+chunk, n); i++ {
			s, _ := task.New("mem.noop", body)
			s.ID = fmt.Sprintf("mem-%d-%d", payload, i)
			s.Capability = "nobody"
			specs = append(specs, s)
		}
		retryOp(t, time.Minute, "submit", func(ctx context.Context) error {
			_, err := cl.SubmitMany(ctx, specs)
			return err
		})
	}
	js, _ := jetstream.New(cl.Conn())
	eventually(t, 20*time.Minute, fmt.Sprintf("%d dispatches stored", n), func() (bool, string) {
		stored, err := queue.ReadyDepth(ctx, js)
		if err != nil {
			return false, err.Error()
		}
		return stored >= uint64(n), fmt.Sprintf("%d stored", stored)
	})
	n64 := rss(t, orch.pid())
	orch.term()
	c.server.term()
	return n64
}

// rss reads a process's resident set size.
func rss(t *testing.T, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
