package metrics

import "github.com/prometheus/client_golang/prometheus"

// Relay metrics (ax relay, the transactional outbox's publisher).
type Relay struct {
	// LagSeconds is the age of the oldest committed outbox row not yet
	// published (0: caught up), by the database's clock.
	LagSeconds prometheus.Gauge
	// Pending is the number of committed outbox rows not yet published
	// (all relays).
	Pending prometheus.Gauge
	// DBDown is 1 while the backlog cannot be read from MySQL.
	DBDown prometheus.Gauge
}

// NewRelay registers the relay's metrics on reg (nil: unregistered).
// published and failures read the relay's own counters (rows published and
// marked sent; failed rounds) when scraped.
func NewRelay(reg prometheus.Registerer, published, failures func() float64) *Relay {
	m := &Relay{
		LagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_outbox_lag_seconds",
			Help: "Age of the oldest committed ax_outbox row not yet published (0 when caught up)."}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_outbox_pending_rows",
			Help: "Committed ax_outbox rows not yet published (all relays)."}),
		DBDown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ax_outbox_db_down",
			Help: "1 while the relay cannot read the outbox backlog from MySQL."}),
	}
	register(reg, m.LagSeconds, m.Pending, m.DBDown,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_outbox_published_rows_total",
			Help: "ax_outbox rows this relay published and marked sent."}, published),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ax_outbox_relay_failures_total",
			Help: "Relay rounds that failed (MySQL or NATS errors); their rows stay pending."}, failures))
	return m
}
