package cli

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/internal/health"
	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/orchestrator"
	"github.com/ax-run/ax/orchestrator/promorch"
)

// daemon is what a long-running command (orchestrator, worker, mirror)
// starts with: its logger, its NATS connection and, with --metrics-addr,
// the served metrics registry.
type daemon struct {
	log zerolog.Logger
	nc  *nats.Conn
	reg *prometheus.Registry
	// tp receives spans when the OTEL_* environment configures tracing
	// (nil: off).
	tp          trace.TracerProvider
	stopTracing func(context.Context) error
	// health is served beside the metrics (health.go).
	health *health.Checks
}

// startDaemon connects and serves metrics; close the connection with stop.
func (g *globals) startDaemon(ctx context.Context, name, metricsAddr string) (*daemon, error) {
	d := &daemon{log: g.logger(), health: &health.Checks{}}
	var err error
	if d.nc, err = g.connect(name); err != nil {
		return nil, err
	}
	d.health.Add("nats", health.NATS(d.nc))
	if d.reg, err = serveMetrics(ctx, metricsAddr, d.health.Mount, d.log); err != nil {
		d.nc.Close()
		return nil, err
	}
	if d.tp, d.stopTracing, err = startTracing(ctx, name); err != nil {
		d.nc.Close()
		return nil, err
	}
	if d.tp != nil {
		d.log.Info().Msg("tracing: exporting spans over OTLP (OTEL_* environment)")
	}
	return d, nil
}

func (d *daemon) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.stopTracing(ctx); err != nil {
		d.log.Warn().Err(err).Msg("last spans not exported")
	}
	d.nc.Close()
}

// addMetricsFlag adds --metrics-addr to a command.
func addMetricsFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics (e.g. :9464; default off)")
}

// serveMetrics starts the metrics endpoint (and the mounted probes) when
// addr is set and returns the registry to register on (nil when off).
func serveMetrics(ctx context.Context, addr string, mount func(*http.ServeMux), log zerolog.Logger) (*prometheus.Registry, error) {
	if addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bound, err := metrics.Listen(ctx, addr, reg, mount)
	if err != nil {
		return nil, err
	}
	log.Info().Str("addr", bound).Msg("serving /metrics, /healthz and /readyz")
	return reg, nil
}

// orchestratorMetrics sets an orchestrator config's metrics when reg is
// not nil (off: none, and no sampling of JetStream); call the returned
// func with the orchestrator once it exists to export its breakers and
// pauses.
func orchestratorMetrics(reg *prometheus.Registry, cfg *orchestrator.Config) func(*orchestrator.Orchestrator) {
	if reg == nil {
		return func(*orchestrator.Orchestrator) {}
	}
	m := promorch.New(reg)
	cfg.Metrics = m
	return m.Watch
}

// exportMirrorLag samples a mirror's lag into its gauges until ctx ends.
func exportMirrorLag(ctx context.Context, m *mirror.Mirror, reg *prometheus.Registry) {
	if reg == nil {
		return
	}
	g := metrics.NewMirror(reg)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			if lag, err := m.Lag(ctx); err == nil {
				g.LagSeconds.Set(lag.Age.Seconds())
				g.Pending.Set(float64(lag.Pending) + float64(lag.InFlight))
				g.Written.Set(float64(lag.Written))
				down := 0.0
				if !lag.DBDownSince.IsZero() {
					down = 1
				}
				g.DBDown.Set(down)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
