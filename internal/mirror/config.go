package mirror

import (
	"time"

	"github.com/rs/zerolog"
)

// Defaults for Config.
const (
	DefaultBatch             = 500
	DefaultFetchWait         = time.Second
	DefaultAckWait           = time.Minute
	DefaultRetentionAge      = 30 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
	DefaultRetentionBatch    = 5000
	DefaultLagInterval       = 15 * time.Second
	DefaultLagWarnEvents     = 1000
	DefaultRetryMin          = 100 * time.Millisecond
	DefaultRetryMax          = 15 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultConnectTimeout    = 10 * time.Second
)

// Config configures a Mirror. The zero value is usable.
type Config struct {
	// Batch is the largest number of events written in one transaction.
	// Default 500.
	Batch int
	// FetchWait is how long an idle mirror waits for the next event before
	// it checks again. Default 1s.
	FetchWait time.Duration
	// AckWait is how long a fetched batch may stay unacknowledged before
	// JetStream redelivers it (to this or another mirror). While MySQL is
	// down the mirror keeps its batch alive with progress acks. Default 1m.
	AckWait time.Duration
	// RetentionAge is how long rows are kept: events, finished attempts and
	// terminal tasks older than this are deleted. Default 30 days; negative
	// disables retention.
	RetentionAge time.Duration
	// RetentionInterval is how often retention runs. Default 1h.
	RetentionInterval time.Duration
	// RetentionBatch bounds the rows one DELETE removes. Default 5000.
	RetentionBatch int
	// LagInterval is how often the lag is checked and, when it grows, logged.
	// Default 15s.
	LagInterval time.Duration
	// LagWarnEvents is the number of pending events from which a growing lag
	// is logged as a warning. Default 1000.
	LagWarnEvents uint64
	// RetryMin and RetryMax bound the backoff between attempts to write a
	// batch while MySQL fails. Defaults 100ms and 15s.
	RetryMin, RetryMax time.Duration
	// WriteTimeout bounds one attempt to write a batch. Default 30s.
	WriteTimeout time.Duration
	// ConnectTimeout bounds the checks Start makes (ping, schema,
	// privileges). Default 10s.
	ConnectTimeout time.Duration
	// Logger receives structured logs. Default: disabled.
	Logger *zerolog.Logger
	// Now is the clock (retention cut-off, lag age). Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.FetchWait <= 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.RetentionAge == 0 {
		c.RetentionAge = DefaultRetentionAge
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.RetentionBatch <= 0 {
		c.RetentionBatch = DefaultRetentionBatch
	}
	if c.LagInterval <= 0 {
		c.LagInterval = DefaultLagInterval
	}
	if c.LagWarnEvents == 0 {
		c.LagWarnEvents = DefaultLagWarnEvents
	}
	if c.RetryMin <= 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = c.RetryMin
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
