package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// Lag is how far the audit database is behind AX_TASKS. Pending and
// InFlight are consumer-wide (shared by every mirror process); the rest is
// this process's view.
type Lag struct {
	// Pending is the number of events not yet delivered to any mirror
	// (the consumer's NumPending).
	Pending uint64 `json:"pending"`
	// InFlight is the number of events delivered but not yet acknowledged
	// (being written, or held while MySQL is down).
	InFlight int `json:"in_flight"`
	// OldestUnmirrored is the time of the oldest event not yet acknowledged,
	// zero when caught up.
	OldestUnmirrored time.Time `json:"oldest_unmirrored,omitempty"`
	// Age is how long the oldest unmirrored event has waited: the lag as a
	// duration; 0 when caught up.
	Age time.Duration `json:"age"`
	// LastSeq and LastEventAt identify the newest event this process wrote.
	LastSeq     uint64    `json:"last_seq"`
	LastEventAt time.Time `json:"last_event_at,omitempty"`
	// LastEventAge is how old the newest event this process wrote is.
	LastEventAge time.Duration `json:"last_event_age"`
	// Written counts the events this process wrote.
	Written uint64 `json:"written"`
	// DBDownSince is when writes started failing; zero while MySQL works.
	DBDownSince time.Time `json:"db_down_since,omitempty"`
	// LastError is the last database error while DBDownSince is set.
	LastError string `json:"last_error,omitempty"`
}

// Behind reports whether any event is not yet mirrored.
func (l Lag) Behind() bool { return l.Pending > 0 || l.InFlight > 0 }

// Lag reports the mirror's lag. It needs NATS, not MySQL, so it works
// during a database outage.
func (m *Mirror) Lag(ctx context.Context) (Lag, error) {
	m.mu.Lock()
	cons, stream, st := m.cons, m.stream, m.stats
	m.mu.Unlock()
	if cons == nil {
		return Lag{}, errors.New("mirror: not started")
	}
	now := m.cfg.Now()
	l, err := consumerLag(ctx, cons, stream, now)
	if err != nil {
		return Lag{}, err
	}
	l.LastSeq, l.LastEventAt, l.Written = st.lastSeq, st.lastEventAt, st.written
	l.DBDownSince, l.LastError = st.downSince, st.lastError
	if !st.lastEventAt.IsZero() {
		l.LastEventAge = now.Sub(st.lastEventAt)
		if l.Behind() && l.Age == 0 {
			l.Age = l.LastEventAge
		}
	}
	return l, nil
}

// ConsumerLag reports the lag of the shared mirror consumer from NATS alone
// (for tools that do not run a mirror, e.g. `ax mirror lag`).
func ConsumerLag(ctx context.Context, js jetstream.JetStream, now time.Time) (Lag, error) {
	stream, err := js.Stream(ctx, subject.StreamTasks)
	if err != nil {
		return Lag{}, fmt.Errorf("mirror: bind stream %s: %w", subject.StreamTasks, err)
	}
	cons, err := stream.Consumer(ctx, subject.ConsumerMirror)
	if err != nil {
		return Lag{}, fmt.Errorf("mirror: consumer %s (has a mirror ever run?): %w", subject.ConsumerMirror, err)
	}
	return consumerLag(ctx, cons, stream, now)
}

func consumerLag(ctx context.Context, cons jetstream.Consumer, stream jetstream.Stream, now time.Time) (Lag, error) {
	info, err := cons.Info(ctx)
	if err != nil {
		return Lag{}, fmt.Errorf("mirror: read consumer info: %w", err)
	}
	l := Lag{Pending: info.NumPending, InFlight: info.NumAckPending}
	if l.Behind() {
		// The first unacknowledged event is the one after the ack floor.
		if msg, err := stream.GetMsg(ctx, info.AckFloor.Stream+1); err == nil {
			l.OldestUnmirrored = msg.Time
			l.Age = max(now.Sub(msg.Time), 0)
		}
	}
	return l, nil
}

// consumerLag is the number of events not yet acknowledged.
func (m *Mirror) consumerLag(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := m.consumer().Info(cctx)
	if err != nil {
		return 0, err
	}
	return info.NumPending + uint64(info.NumAckPending), nil
}

// watchLag checks the lag every LagInterval and logs when it grows past
// LagWarnEvents (or while MySQL is down), and when it is caught up again.
func (m *Mirror) watchLag(ctx context.Context) {
	t := time.NewTicker(m.cfg.LagInterval)
	defer t.Stop()
	var prev uint64
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := m.Lag(lctx)
		cancel()
		if err != nil {
			m.log.Debug().Err(err).Msg("lag check failed")
			continue
		}
		behind := l.Pending + uint64(l.InFlight)
		down := !l.DBDownSince.IsZero()
		switch {
		case behind > prev && (behind >= m.cfg.LagWarnEvents || down):
			ev := m.log.Warn().Uint64("lag_events", behind).Dur("lag_age", l.Age)
			if down {
				ev = ev.Time("db_down_since", l.DBDownSince).Str("db_error", l.LastError)
			}
			ev.Msg("mirror lag growing")
			warned = true
		case warned && behind == 0:
			m.log.Info().Msg("mirror caught up")
			warned = false
		}
		prev = behind
	}
}

// MarshalJSON leaves out the times that are zero (OldestUnmirrored when
// caught up, LastEventAt before the first write, DBDownSince while MySQL
// works) rather than printing 0001-01-01T00:00:00Z: encoding/json's
// omitempty does not omit a zero time.Time.
func (l Lag) MarshalJSON() ([]byte, error) {
	type plain Lag // without this method
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return json.Marshal(struct {
		plain
		OldestUnmirrored *time.Time `json:"oldest_unmirrored,omitempty"`
		LastEventAt      *time.Time `json:"last_event_at,omitempty"`
		DBDownSince      *time.Time `json:"db_down_since,omitempty"`
	}{plain(l), opt(l.OldestUnmirrored), opt(l.LastEventAt), opt(l.DBDownSince)})
}
