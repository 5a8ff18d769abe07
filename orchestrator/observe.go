package orchestrator

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ax-run/ax/internal/breaker"
	"github.com/ax-run/ax/internal/consume"
	"github.com/ax-run/ax/internal/metrics"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// DefaultSampleInterval is how often an orchestrator with metrics reads
// backlogs, timers and dead letters from JetStream.
const DefaultSampleInterval = 5 * time.Second

// observer feeds the metrics that describe tasks moving (from the
// transitions this orchestrator writes) and AX's state (sampled from
// JetStream). Its methods do nothing when metrics are off.
type observer struct {
	on      bool
	flow    *metrics.Flow
	cluster *metrics.Cluster
	// known remembers every backlog series seen, so one that emptied is
	// set to 0 rather than left at its last value.
	known map[[2]string]bool
}

func newObserver(reg prometheus.Registerer, g *gate) *observer {
	ob := &observer{on: reg != nil, flow: metrics.NewFlow(reg), cluster: metrics.NewCluster(reg), known: map[[2]string]bool{}}
	metrics.Register(reg, gateCollector{g})
	return ob
}

func seconds(from time.Time, to *time.Time) (float64, bool) {
	if to == nil || from.IsZero() {
		return 0, false
	}
	return max(to.Sub(from).Seconds(), 0), true
}

// wrote records the transition cur → next that was just written.
func (ob *observer) wrote(cur task.Task, next *task.Task) {
	if !ob.on || next.State == cur.State {
		return
	}
	prio := strconv.Itoa(next.PriorityLevel())
	if cur.State == task.Running {
		outcome := string(next.State)
		switch next.State {
		case task.Retrying:
			outcome = string(task.Failed)
			ob.flow.Retries.WithLabelValues(next.Type).Inc()
		case task.Waiting: // a planner succeeded; its shards come next
			outcome = string(task.Succeeded)
		}
		ob.flow.Attempts.WithLabelValues(next.Type, outcome).Inc()
		if cur.ReadyAt != nil && cur.Takeovers == 0 {
			if s, ok := seconds(*cur.ReadyAt, cur.StartedAt); ok {
				ob.flow.SchedulingDelay.WithLabelValues(prio).Observe(s)
			}
		}
		if cur.Attempt == 1 && cur.Redrives == 0 && cur.Takeovers == 0 {
			if s, ok := seconds(cur.SubmittedAt, cur.StartedAt); ok {
				ob.flow.SubmitToStart.WithLabelValues(prio).Observe(s)
			}
		}
	}
	switch next.State {
	case task.Failed:
		ob.flow.DeadLetters.WithLabelValues(next.Type).Inc()
	case task.Succeeded:
		if s, ok := seconds(next.SubmittedAt, next.FinishedAt); ok {
			ob.flow.SubmitToFinish.WithLabelValues(prio).Observe(s)
		}
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// countRedeliveries wraps a consumer's handler to count messages it gets
// again.
func (ob *observer) countRedeliveries(consumer string, h consume.Handler) consume.Handler {
	if !ob.on {
		return h
	}
	c := ob.flow.Redeliveries.WithLabelValues(consumer)
	return func(ctx context.Context, msg jetstream.Msg) error {
		if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
			c.Inc()
		}
		return h(ctx, msg)
	}
}

// sampleLoop samples AX's state from JetStream every interval until ctx ends.
func (o *Orchestrator) sampleLoop(ctx context.Context) {
	defer o.bg.Done()
	t := time.NewTicker(o.cfg.SampleInterval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := o.sample(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			o.obs.cluster.SampleErrors.Inc()
			o.log.Debug("metrics sample failed", slog.Any("error", err))
		} else if err == nil {
			o.obs.cluster.LastSample.Set(float64(o.now().Unix()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sample reads the ready backlogs, the orchestrator consumers' pending
// messages and the timer, dead-letter and poison counts: a few requests per
// non-empty capability and priority, whatever the number of tasks.
func (o *Orchestrator) sample(ctx context.Context) error {
	c := o.obs.cluster
	now := o.now()
	// Every ready consumer (a capability's level that executors serve),
	// then the levels with dispatches and no consumer (nobody serves them).
	type level struct {
		pending, inHand uint64
		start           uint64 // first undelivered stream sequence
	}
	levels := map[[2]string]*level{}
	names := o.ready.ConsumerNames(ctx)
	for name := range names.Name() {
		capability, prio, ok := subject.ParseReadyConsumer(name)
		if !ok {
			continue
		}
		cons, err := o.ready.Consumer(ctx, name)
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		levels[[2]string{capability, strconv.Itoa(prio)}] = &level{pending: ci.NumPending, inHand: uint64(ci.NumAckPending), start: ci.Delivered.Stream + 1}
	}
	if err := names.Err(); err != nil {
		return err
	}
	info, err := o.ready.Info(ctx, jetstream.WithSubjectFilter(subject.ReadyAll))
	if err != nil {
		return err
	}
	for subj, n := range info.State.Subjects {
		capability, prio, ok := subject.ReadyParts(subj)
		key := [2]string{capability, strconv.Itoa(prio)}
		if ok && levels[key] == nil {
			levels[key] = &level{pending: n, start: 1}
		}
	}
	inHand := map[string]float64{}
	for key, l := range levels {
		c.Backlog.WithLabelValues(key[0], key[1]).Set(float64(l.pending))
		inHand[key[0]] += float64(l.inHand)
		age := 0.0
		if l.pending > 0 {
			subj := subject.Ready(key[0], atoi(key[1]))
			if msg, err := o.ready.GetMsg(ctx, l.start, jetstream.WithGetMsgSubject(subj)); err == nil {
				age = max(now.Sub(msg.Time).Seconds(), 0)
			}
		}
		c.BacklogOldest.WithLabelValues(key[0], key[1]).Set(age)
		o.obs.known[key] = true
	}
	for key := range o.obs.known {
		if levels[key] == nil { // emptied, and its consumer is gone
			c.Backlog.WithLabelValues(key[0], key[1]).Set(0)
			c.BacklogOldest.WithLabelValues(key[0], key[1]).Set(0)
		}
	}
	for capability, n := range inHand {
		c.InHand.WithLabelValues(capability).Set(n)
	}
	for _, l := range o.loops() {
		stream, err := o.js.Stream(ctx, l.stream)
		if err != nil {
			return err
		}
		cons, err := stream.Consumer(ctx, l.consumer)
		if err != nil {
			return err
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		c.ConsumerPending.WithLabelValues(l.consumer).Set(float64(ci.NumPending) + float64(ci.NumAckPending))
	}
	for name, g := range map[string]prometheus.Gauge{subject.StreamTimers: c.TimersPending, subject.StreamDLQ: c.DeadLetters, subject.StreamPoison: c.Poison} {
		st, err := o.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		si, err := st.Info(ctx)
		if err != nil {
			return err
		}
		g.Set(float64(si.State.Msgs))
	}
	return nil
}

// gateCollector exports the breakers and pauses of an orchestrator's copy
// of the AX_CONTROL bucket at scrape time.
type gateCollector struct{ g *gate }

func (gc gateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- metrics.BreakerStateDesc
	ch <- metrics.PausedDesc
}

func (gc gateCollector) Collect(ch chan<- prometheus.Metric) {
	gc.g.mu.Lock()
	defer gc.g.mu.Unlock()
	for typ, st := range gc.g.shared {
		v := 0.0
		switch st {
		case breaker.HalfOpen:
			v = 1
		case breaker.Open:
			v = 2
		}
		ch <- prometheus.MustNewConstMetric(metrics.BreakerStateDesc, prometheus.GaugeValue, v, typ)
	}
	for typ, p := range gc.g.pauses {
		if typ == "" {
			typ = "all"
		}
		ch <- prometheus.MustNewConstMetric(metrics.PausedDesc, prometheus.GaugeValue, 1, typ, strconv.FormatBool(p.RetriesOnly))
	}
}
