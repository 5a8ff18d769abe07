package e2e

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/subject"
)

// leaderProbe measures how long AX_TASKS could not answer a leader read
// during the faults: it reads one subject's last message (a leader read on
// a replicated stream; "not found" is an answer) every probeEvery through
// each node's connection, and keeps the times any of them was answered. The
// longest gap between answers is the store's own outage as the best-placed
// client saw it, to set beside the tasks' longest stall: a task cannot move
// while its stream has no leader.
type leaderProbe struct {
	mu       sync.Mutex
	answered []time.Time
	stop     chan struct{}
	done     sync.WaitGroup
}

const probeEvery = 200 * time.Millisecond

func startLeaderProbe(readers []jetstream.JetStream) *leaderProbe {
	p := &leaderProbe{stop: make(chan struct{})}
	for _, js := range readers {
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			p.run(js)
		}()
	}
	return p
}

func (p *leaderProbe) run(js jetstream.JetStream) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	subj := subject.TaskEvents("e2e-leader-probe")
	var st jetstream.Stream
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		if st == nil {
			st, err = js.Stream(ctx, subject.StreamTasks)
		}
		if err == nil {
			_, err = st.GetLastMsgForSubject(ctx, subj)
		}
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
			p.mu.Lock()
			p.answered = append(p.answered, time.Now())
			p.mu.Unlock()
		}
	}
}

// longestGap stops the probe and returns the longest time between answers
// from `from` to `to`, and when it began.
func (p *leaderProbe) longestGap(from, to time.Time) (time.Duration, time.Time) {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	times := slices.Clone(p.answered)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	last, longest, began := from, time.Duration(0), from
	for _, at := range append(times, to) {
		if at.Before(from) {
			continue
		}
		if at.After(to) {
			at = to
		}
		if gap := at.Sub(last); gap > longest {
			longest, began = gap, last
		}
		last = at
		if !last.Before(to) {
			break
		}
	}
	return longest, began
}
