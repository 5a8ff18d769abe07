package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/testenv"
)

// Logs are one format: text without colour off a terminal or JSON, RFC
// 3339 times with a date, the same for the command and the executor it
// embeds (ax worker), whose library logs through *slog.Logger.
func TestLogFormats(t *testing.T) {
	t.Parallel()
	for _, format := range []string{logFormatText, logFormatJSON} {
		var buf bytes.Buffer
		g := &globals{stderr: &buf, logLevel: "info", logFormat: format}
		log := g.logger()
		log.Info().Str("task_id", "t1").Msg("hello")
		slogger(log).Info("from a library", "executor", "e1")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: %q", format, buf.String())
		}
		for _, line := range lines {
			if strings.Contains(line, "\x1b[") {
				t.Errorf("%s: colour codes in a log that is not a terminal: %q", format, line)
			}
			var at string
			if format == logFormatJSON {
				var m map[string]any
				if err := json.Unmarshal([]byte(line), &m); err != nil || m["level"] != "info" || m["message"] == nil {
					t.Fatalf("json: %q (%v)", line, err)
				}
				at, _ = m["time"].(string)
			} else {
				at, _, _ = strings.Cut(line, " ")
			}
			if _, err := time.Parse(time.RFC3339, at); err != nil {
				t.Errorf("%s: time %q is not RFC 3339: %q", format, at, line)
			}
		}
	}
}

func TestEmbeddedExecutorLogsInTheCommandsFormat(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	ctx, cancel := context.WithCancel(testenv.Context(t, time.Minute))
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"worker", "--id", "w-json", "--nats", srv.URL(), "--log-format", "json"}, &out, &errOut)
	}()
	testenv.Eventually(t, 30*time.Second, "the executor's and the worker's start logged", func() bool {
		s := errOut.String()
		return strings.Contains(s, `"executor started"`) && strings.Contains(s, "worker running")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("ax worker exited %d: %s", code, errOut.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if _, err := time.Parse(time.RFC3339, m["time"].(string)); err != nil || m["level"] == nil {
			t.Errorf("log line %q", line)
		}
	}
	var o, e bytes.Buffer
	if code := Run(context.Background(), []string{"workers", "--log-format", "xml", "-o", "json"}, &o, &e); code != 1 || !strings.Contains(o.String(), `"code": "invalid"`) {
		t.Errorf("--log-format xml: exit %d: %s", code, o.String())
	}
}
