package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
	"github.com/ax-run/ax/orchestrator"
)

// ax tasks ls lists tasks by state, type, capability and last change,
// newest first, a page at a time, from JetStream and from the MySQL
// mirror alike.
func TestTasksLs(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	url := srv.URL()
	testenv.Orchestrator(t, url, orchestrator.Config{})
	ex := testenv.Executor(t, url, executor.Config{})
	demo.Register(ex)
	testenv.Start(t, ex)
	dsn, db := mirrortest.DB(t)
	m, err := mirror.New(testenv.Conn(t, url), db, mirror.Config{FetchWait: 100 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, time.Minute)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	ax := func(wantCode int, args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(ctx, append(args, "--nats", url)...)
		if code != wantCode {
			t.Fatalf("ax %v exited %d: %s%s", args, code, errOut, out)
		}
		return out
	}
	for _, id := range []string{"ls-1", "ls-2", "ls-3", "ls-4", "ls-5"} {
		ax(0, "submit", demo.TypeNoop, "--id", id, "--wait")
	}
	ax(0, "submit", demo.TypeFail, "--id", "ls-bad", "--max-retries", "0", "--wait")
	testenv.Eventually(t, 30*time.Second, "the tasks mirrored", func() bool {
		var n int
		return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM ax_tasks WHERE state IN ('succeeded','failed')").Scan(&n) == nil && n == 6
	})
	for _, src := range []struct {
		name string
		args []string
	}{{"jetstream", nil}, {"mysql", []string{"--mysql-dsn", dsn}}} {
		// Pages of 2 of the succeeded tasks, newest first.
		var ids []string
		cursor := ""
		for pages := 1; ; pages++ {
			args := append([]string{"tasks", "ls", "--state", "succeeded", "--type", demo.TypeNoop, "--capability", "default", "--since", "1h", "--limit", "2", "-o", "json"}, src.args...)
			if cursor != "" {
				args = append(args, "--cursor", cursor)
			}
			raw := ax(0, args...)
			checkJSONContract(t, "tasks ls", raw)
			var p tasksPage
			if err := json.Unmarshal([]byte(raw), &p); err != nil || p.Source != src.name {
				t.Fatalf("%s: %s (%v)", src.name, raw, err)
			}
			for _, r := range p.Tasks {
				ids = append(ids, r.ID)
			}
			if cursor = p.Next; cursor == "" {
				if pages != 3 {
					t.Fatalf("%s: %d pages for 5 tasks by 2", src.name, pages)
				}
				break
			}
		}
		if strings.Join(ids, ",") != "ls-5,ls-4,ls-3,ls-2,ls-1" {
			t.Errorf("%s: listed %v", src.name, ids)
		}
		out := ax(0, append([]string{"tasks", "ls", "--state", "failed"}, src.args...)...)
		if !strings.Contains(out, "ls-bad") || strings.Contains(out, "ls-1 ") {
			t.Errorf("%s: failed tasks:\n%s", src.name, out)
		}
	}
	if out := ax(1, "tasks", "ls", "--state", "sleeping", "-o", "json"); !strings.Contains(out, `"code": "invalid"`) {
		t.Errorf("bad state: %s", out)
	}
	if out := ax(1, "tasks", "ls", "--since", "yesterday", "-o", "json"); !strings.Contains(out, `"code": "invalid"`) {
		t.Errorf("bad since: %s", out)
	}
}
