package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/health"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/internal/natsserver"
	"github.com/ax-run/ax/sdk"
)

// Every long-running command answers probes (internal/health): on its
// --metrics-addr beside /metrics (orchestrator, worker, mirror, relay, dev),
// on its own address (console), or on --health-addr (server). Liveness
// (/healthz) is the process serving; readiness (/readyz) is, for each:
//
//	orchestrator  connected to NATS and started (AX's streams set up, consumers bound)
//	worker        connected to NATS and started (bound to its capabilities' streams)
//	mirror        connected to NATS, started, and its writes to MySQL not failing
//	relay         connected to NATS and started (outbox table migrated)
//	console       connected to NATS (and MySQL answering, with a DSN)
//	dev           its orchestrator and executors started, connected to its server
//	server        accepting connections with JetStream enabled

// defaultHealthURL is what `ax healthcheck` asks without an argument: the
// readiness of a process run with --metrics-addr :9464.
const defaultHealthURL = "http://127.0.0.1:9464/readyz"

// healthcheckCmd probes a URL and exits 0 when it answers 200: the
// healthcheck of a compose service whose image has no shell or curl.
func healthcheckCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck [URL]",
		Short: "Exit 0 when URL (default " + defaultHealthURL + ") answers 200: a container healthcheck without a shell",
		Long: `GETs a readiness or liveness URL of an AX process and exits 0 when it answers
200, 1 otherwise (printing why). Every long-running command serves /healthz
(the process is up) and /readyz (connected to NATS and started; the mirror
also needs MySQL) on its --metrics-addr, the console on its own address.
The AX image has no shell, so a compose healthcheck runs this.`,
		Example: `  ax healthcheck
  ax healthcheck http://127.0.0.1:8080/readyz`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := defaultHealthURL
			if len(args) == 1 {
				url = args[0]
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := health.Probe(ctx, url); err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(map[string]any{"ok": true, "url": url})
			}
			fmt.Fprintln(g.stdout, "ok")
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}

// mirrorWrites is a mirror's readiness beyond being started: its writes
// to MySQL are not failing.
func mirrorWrites(m *mirror.Mirror) func(context.Context) error {
	return func(ctx context.Context) error {
		lag, err := m.Lag(ctx)
		if err != nil {
			return err
		}
		if !lag.DBDownSince.IsZero() {
			return fmt.Errorf("writes to MySQL failing since %s", lag.DBDownSince.UTC().Format(time.RFC3339))
		}
		return nil
	}
}

// consoleHandler serves the console's probes before its pages: ready
// while connected to NATS and, with a DSN, while MySQL answers a ping
// (nil: no database).
func consoleHandler(h http.Handler, c *sdk.Client, ping func(context.Context) error) http.Handler {
	var checks health.Checks
	checks.Add("nats", health.NATS(c.Conn()))
	if ping != nil {
		checks.Add("mysql", ping)
	}
	return checks.Handler(h)
}

// serveServerHealth serves `ax server`'s probes on addr ("" for none) until
// ctx ends: ready while it accepts connections with JetStream enabled.
func serveServerHealth(ctx context.Context, addr string, s *natsserver.Server, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	var checks health.Checks
	checks.Add("nats-server", func(context.Context) error {
		switch {
		case !s.ReadyForConnections(500 * time.Millisecond):
			return errors.New("not accepting connections")
		case !s.JetStreamEnabled():
			return errors.New("JetStream not enabled")
		}
		return nil
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("health listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	checks.Mount(mux)
	health.Serve(ctx, ln, mux)
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /healthz and /readyz")
	return nil
}
