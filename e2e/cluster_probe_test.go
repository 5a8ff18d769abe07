package e2e

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/leaderget"
	"github.com/ax-run/ax/internal/subject"
)

// leaderProbe measures how long AX_TASKS could not answer a leader read
// during the faults: it reads one subject's last message (a leader read on
// a replicated stream; "not found" is an answer) every probeEvery through
// each node's connection, and keeps the times any of them was answered. The
// longest gap between answers is the store's own outage as the best-placed
// client saw it, to set beside the tasks' longest stall: a task cannot move
// while its stream has no leader.
//
// Each tick reads twice: as the jetstream package does (the first answer
// taken) and as AX does (internal/leaderget: past a member's "unavailable"
// while the leader answers); the refusals of each are counted.
type leaderProbe struct {
	mu       sync.Mutex
	answered []time.Time // AX's reads (leaderget)
	plainAt  []time.Time // the jetstream package's reads
	reads    int
	refused  int // AX's reads not answered
	plainNo  int // the jetstream package's reads not answered
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
	reader := leaderget.New(js)
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
		plain := err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
		plainEnd := time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		_, err = reader.Last(ctx, subject.StreamTasks, subj)
		cancel()
		ax := err == nil || errors.Is(err, jetstream.ErrMsgNotFound)
		p.mu.Lock()
		p.reads++
		if plain {
			p.plainAt = append(p.plainAt, plainEnd)
		} else {
			p.plainNo++
		}
		if ax {
			p.answered = append(p.answered, time.Now())
		} else {
			p.refused++
		}
		p.mu.Unlock()
	}
}

// probeFigures is what the probe saw from `from` to `to`: the longest gap
// between answers to AX's reads and when it began, the same for the
// jetstream package's reads, and the reads each refused.
type probeFigures struct {
	outage, plainOutage     time.Duration
	outageAt, plainOutageAt time.Time
	reads, refused, plainNo int
}

// figures stops the probe and returns its figures from `from` to `to`.
func (p *leaderProbe) figures(from, to time.Time) probeFigures {
	close(p.stop)
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := probeFigures{reads: p.reads, refused: p.refused, plainNo: p.plainNo}
	f.outage, f.outageAt = longestGap(p.answered, from, to)
	f.plainOutage, f.plainOutageAt = longestGap(p.plainAt, from, to)
	return f
}

// longestGap returns the longest time between answers from `from` to
// `to`, and when it began.
func longestGap(answered []time.Time, from, to time.Time) (time.Duration, time.Time) {
	times := slices.Clone(answered)
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
