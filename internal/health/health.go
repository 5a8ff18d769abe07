// Package health answers a long-running process's probes: /healthz
// (liveness: the process is up and serving) and /readyz (readiness: every
// named check passes — connected to NATS, the component started, its
// database reachable). Kubernetes probes, compose healthchecks (`ax
// healthcheck URL`, for images without a shell) and load balancers read
// them.
//
// /readyz answers 200 when every check passes and 503 otherwise, listing
// each check on a line of its own:
//
//	[+]nats ok
//	[-]orchestrator failed: starting
//	readyz check failed
//
// /healthz answers 200 while the process serves HTTP: a liveness probe
// must not fail because a dependency (NATS, MySQL) is away, or every pod
// would be restarted during that dependency's outage.
package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// CheckTimeout bounds each check of one /readyz request.
const CheckTimeout = 2 * time.Second

// ErrStarting is a component's check until it has started.
var ErrStarting = errors.New("starting")

// Checks is a process's readiness checks, safe for concurrent use. The zero
// value has no checks and is ready.
type Checks struct {
	mu     sync.RWMutex
	checks []check
}

type check struct {
	name string
	fn   func(context.Context) error
}

// Result is one check's outcome.
type Result struct {
	Name string
	Err  error
}

// Add registers a check; name is how /readyz lists it. fn gets a context
// bounded by CheckTimeout and returns nil when ready.
func (c *Checks) Add(name string, fn func(context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks = append(c.checks, check{name, fn})
}

// Starting registers a component that is not ready (ErrStarting) until
// the returned function is called, once its Start returned.
func (c *Checks) Starting(name string) (started func()) {
	var ok atomic.Bool
	c.Add(name, func(context.Context) error {
		if !ok.Load() {
			return ErrStarting
		}
		return nil
	})
	return func() { ok.Store(true) }
}

// Check runs every check, each bounded by CheckTimeout, in the order they
// were added.
func (c *Checks) Check(ctx context.Context) []Result {
	c.mu.RLock()
	checks := append([]check(nil), c.checks...)
	c.mu.RUnlock()
	out := make([]Result, len(checks))
	for i, ch := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		out[i] = Result{Name: ch.name, Err: ch.fn(cctx)}
		cancel()
	}
	return out
}

// Ready reports whether every check passes; the error names the first
// that does not.
func (c *Checks) Ready(ctx context.Context) error {
	for _, r := range c.Check(ctx) {
		if r.Err != nil {
			return fmt.Errorf("%s: %w", r.Name, r.Err)
		}
	}
	return nil
}

// Mount serves /healthz and /readyz on mux.
func (c *Checks) Mount(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		failed := false
		for _, res := range c.Check(r.Context()) {
			if res.Err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", res.Name, res.Err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", res.Name)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			b.WriteString("readyz check failed\n")
		} else {
			b.WriteString("ok\n")
		}
		_, _ = w.Write([]byte(b.String()))
	})
}

// Handler returns h with /healthz and /readyz served before it.
func (c *Checks) Handler(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	c.Mount(mux)
	mux.Handle("/", h)
	return mux
}

// NATS is a check that passes while nc is connected (not reconnecting,
// draining or closed).
func NATS(nc *nats.Conn) func(context.Context) error {
	return func(context.Context) error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("connection %s", strings.ToLower(st.String()))
		}
		return nil
	}
}

// Probe GETs url and returns nil when it answers 200 (what `ax
// healthcheck` runs inside an image without a shell or curl).
func Probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s\n%s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Serve serves h on ln until ctx ends, then shuts the server down (giving
// requests in flight two seconds). It returns at once; the two goroutines
// it starts end with ctx.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() { _ = srv.Serve(ln) }()
}
