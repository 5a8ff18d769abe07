package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// leaderProbe measures how long each stream a task's progress depends on
// could not answer a leader read during the faults: it reads one subject's
// last message in each (a leader read on a replicated stream; "not found"
// is an answer) every probeEvery through each node's connection, as AX
// reads (internal/leaderget), and keeps the times any of them was
// answered. The longest gap between answers is the stream's own outage as
// the best-placed client saw it. A task cannot move while a stream its
// next step needs has no leader, so the tasks' stalls are also measured
// net of the times any probed stream was out (stall.net).
type leaderProbe struct {
	mu       sync.Mutex
	answered map[string][]time.Time // by stream
	reads    int
	refused  int
	stop     chan struct{}
	done     sync.WaitGroup
}

const probeEvery = 200 * time.Millisecond

// probeOutageMin is the shortest gap between answers counted as an outage:
// a few probe ticks, so one slow read under load is not one.
const probeOutageMin = time.Second

// probedStreams are the streams probed, each with a subject of its own:
// the task histories, the timers, the concurrency slots, the held tasks'
// markers, the dependency edges and the submissions.
var probedStreams = []struct{ stream, subject string }{
	{subject.StreamTasks, subject.TaskEvents("e2e-leader-probe")},
	{subject.StreamTimers, "ax.timer.e2e.probe"},
	{"KV_AX_SLOTS", "$KV.AX_SLOTS.e2e-probe"},
	{subject.StreamHeld, "ax.held.e2e-probe"},
	{subject.StreamEdges, "ax.edge.e2e.probe"},
	{subject.StreamSubmit, "task.submit.e2e-probe"},
}

// probedReady are the executors' ready consumers the probe asks for their
// info (answered by the consumer's leader), by priority: a ready task
// cannot start while its level's consumer has no leader, so a ready
// task's stall is also measured net of its level's consumer's outages.
func probedReady(level int) string { return subject.ReadyConsumer(task.DefaultCapability, level) }

func startLeaderProbe(readers []jetstream.JetStream) *leaderProbe {
	p := &leaderProbe{stop: make(chan struct{}), answered: map[string][]time.Time{}}
	for _, js := range readers {
		for _, s := range probedStreams {
			reader := leaderget.New(js)
			p.done.Add(1)
			go func() {
				defer p.done.Done()
				p.run(s.stream, func(ctx context.Context) bool {
					_, err := reader.Last(ctx, s.stream, s.subject)
					return err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
				})
			}()
		}
		for level := range task.Levels {
			name := probedReady(level)
			p.done.Add(1)
			go func() {
				defer p.done.Done()
				p.run(name, func(ctx context.Context) bool { return consumerAnswers(ctx, js.Conn(), subject.StreamTasks, name) })
			}()
		}
	}
	return p
}

// run asks read every probeEvery until the probe stops, keeping the times
// it was answered under name.
func (p *leaderProbe) run(name string, read func(ctx context.Context) bool) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok := read(ctx)
		cancel()
		p.mu.Lock()
		p.reads++
		if ok {
			p.answered[name] = append(p.answered[name], time.Now())
		} else {
			p.refused++
		}
		p.mu.Unlock()
	}
}

// consumerAnswers asks for a consumer's info and reports whether its
// leader answered: every reply is read until one without an error, since
// a replica that believes there is no leader answers at once with a 503
// while the leader's answer is on its way (as leaderget does for reads).
func consumerAnswers(ctx context.Context, nc *nats.Conn, stream, consumer string) bool {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.CONSUMER.INFO."+stream+"."+consumer, inbox, nil); err != nil {
		return false
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return false
		}
		var reply struct {
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(msg.Data, &reply) == nil && reply.Error == nil && len(msg.Data) > 0 {
			return true
		}
	}
}

// interval is a span of time.
type interval struct{ from, to time.Time }

// probeFigures is what the probe saw from `from` to `to`: each stream's
// longest gap between answers and when it began, every gap of at least
// probeOutageMin of any stream (merged: the times some probed stream was
// out), and the reads made and refused.
type probeFigures struct {
	longest        map[string]interval
	outages        []interval
	reads, refused int
	// readyOutages are, by priority, the gaps of at least probeOutageMin
	// of that level's ready consumer, merged with outages.
	readyOutages [task.Levels][]interval
	// readyLongest is each ready consumer's longest gap.
	readyLongest [task.Levels]interval
}

// figures stops the probe and returns its figures from `from` to `to`.
func (p *leaderProbe) figures(from, to time.Time) probeFigures {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := probeFigures{longest: map[string]interval{}, reads: p.reads, refused: p.refused}
	var all []interval
	for _, s := range probedStreams {
		gaps := answerGaps(p.answered[s.stream], from, to)
		for _, g := range gaps {
			if d := g.to.Sub(g.from); d > f.longest[s.stream].to.Sub(f.longest[s.stream].from) {
				f.longest[s.stream] = g
			}
			if g.to.Sub(g.from) >= probeOutageMin {
				all = append(all, g)
			}
		}
	}
	f.outages = mergeIntervals(all)
	for level := range task.Levels {
		spans := slices.Clone(all)
		for _, g := range answerGaps(p.answered[probedReady(level)], from, to) {
			if g.to.Sub(g.from) > f.readyLongest[level].to.Sub(f.readyLongest[level].from) {
				f.readyLongest[level] = g
			}
			if g.to.Sub(g.from) >= probeOutageMin {
				spans = append(spans, g)
			}
		}
		f.readyOutages[level] = mergeIntervals(spans)
	}
	return f
}

// renderReady lists each ready consumer's longest outage.
func (f probeFigures) renderReady() string {
	var parts []string
	for level, in := range f.readyLongest {
		parts = append(parts, fmt.Sprintf("p%d %s from %s", level, in.to.Sub(in.from).Round(time.Millisecond), in.from.Format("15:04:05.000")))
	}
	return strings.Join(parts, ", ")
}

// render lists each stream's longest outage, longest first.
func (f probeFigures) render() string {
	type row struct {
		stream string
		in     interval
	}
	var rows []row
	for _, s := range probedStreams {
		rows = append(rows, row{s.stream, f.longest[s.stream]})
	}
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(b.in.to.Sub(b.in.from), a.in.to.Sub(a.in.from)) })
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %s from %s", r.stream, r.in.to.Sub(r.in.from).Round(time.Millisecond), r.in.from.Format("15:04:05.000")))
	}
	var total time.Duration
	for _, o := range f.outages {
		total += o.to.Sub(o.from)
	}
	return fmt.Sprintf("%s; some probed stream out (gaps ≥ %s) %s in all, in %d spans", strings.Join(parts, ", "), probeOutageMin, total.Round(time.Millisecond), len(f.outages))
}

// answerGaps returns the gaps between answers from `from` to `to`.
func answerGaps(answered []time.Time, from, to time.Time) []interval {
	times := slices.Clone(answered)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var gaps []interval
	last := from
	for _, at := range append(times, to) {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			at = to
		}
		if at.After(last) {
			gaps = append(gaps, interval{last, at})
		}
		last = at
		if !last.Before(to) {
			break
		}
	}
	return gaps
}

// mergeIntervals returns the union of spans, sorted and disjoint.
func mergeIntervals(in []interval) []interval {
	in = slices.Clone(in)
	slices.SortFunc(in, func(a, b interval) int { return a.from.Compare(b.from) })
	var out []interval
	for _, s := range in {
		if n := len(out); n > 0 && !s.from.After(out[n-1].to) {
			if s.to.After(out[n-1].to) {
				out[n-1].to = s.to
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// overlap returns how much of [from, to) the disjoint, sorted spans cover.
func overlap(spans []interval, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range spans {
		a, b := s.from, s.to
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}
