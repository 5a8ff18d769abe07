package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/executor/exectrace"
	"github.com/ax-run/ax/executor/promexec"
	"github.com/ax-run/ax/internal/health"
	"github.com/ax-run/ax/internal/metrics"
)

// defaultDevMetricsAddr is where ax dev serves its metrics (a free port
// when it is taken).
const defaultDevMetricsAddr = "127.0.0.1:9464"

// devObservability is ax dev's metrics registry (nil when off) and tracer
// provider (nil unless the OTEL_* environment configures one).
type devObservability struct {
	reg         *prometheus.Registry
	tp          trace.TracerProvider
	stopTracing func(context.Context) error
	// health is served beside the metrics (health.go).
	health health.Checks
}

// startDevObservability serves the demo's metrics and prints where, and
// starts tracing when the OTEL_* environment asks for it.
func startDevObservability(ctx context.Context, g *globals, addr string) (*devObservability, error) {
	obs := &devObservability{}
	var err error
	if obs.tp, obs.stopTracing, err = startTracing(ctx, "ax-dev"); err != nil {
		return nil, err
	}
	if obs.tp != nil {
		fmt.Fprintln(g.stdout, "  tracing: spans exported over OTLP (OTEL_* environment)")
	}
	if addr == "off" || addr == "" {
		return obs, nil
	}
	obs.reg = prometheus.NewRegistry()
	obs.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bound, err := metrics.Listen(ctx, addr, obs.reg, obs.health.Mount)
	if err != nil {
		if bound, err = metrics.Listen(ctx, "127.0.0.1:0", obs.reg, obs.health.Mount); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(g.stdout, "  metrics at http://%s/metrics (Prometheus: scrape it as job ax-orchestrator; dashboard deploy/grafana/ax-dashboard.json, alerts deploy/prometheus/, every metric in deploy/metrics.md)\n", bound)
	return obs, nil
}

// executorHooks sets an executor config's metrics (Config.Metrics and a
// hook) and adds the tracing hook; call the returned func with the
// executor once it exists. The demo runs two executors in one process:
// their series carry an executor label.
func (o *devObservability) executorHooks(cfg *executor.Config) func(*executor.Executor) {
	if o.tp != nil {
		cfg.Hooks = append(cfg.Hooks, exectrace.Hook(o.tp))
	}
	if o.reg == nil {
		return func(*executor.Executor) {}
	}
	m := promexec.New(prometheus.WrapRegistererWith(prometheus.Labels{"executor": cfg.ID}, o.reg))
	cfg.Metrics = m
	cfg.Hooks = append(cfg.Hooks, m.Hook)
	return m.Watch
}

func (o *devObservability) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.stopTracing(ctx)
}
