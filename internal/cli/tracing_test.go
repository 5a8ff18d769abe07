package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTracingEnabledByTheOTELEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		if got := tracingEnabled(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("tracingEnabled(%v) = %v", tc.env, got)
		}
	}
}

// TestTracingExportsOverOTLP points the OTLP/HTTP exporter at a local
// collector stand-in and checks a span arrives there with its service name.
func TestTracingExportsOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tp, shutdown, err := startTracing(ctx, "ax-test-service")
	if err != nil || tp == nil {
		t.Fatalf("startTracing: %v %v", tp, err)
	}
	_, span := tp.Tracer("test").Start(ctx, "a-test-span")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !strings.HasPrefix(got[0], "POST /v1/traces ") ||
		!strings.Contains(got[0], "a-test-span") || !strings.Contains(got[0], "ax-test-service") {
		t.Fatalf("collector received %q", got)
	}
}
