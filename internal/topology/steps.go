package topology

import (
	"cmp"
	"errors"
	"sync"
)

// A Step is one named piece of a set-up that can be resumed: a stream to
// ensure, a handle to bind.
type Step struct {
	Name string
	Run  func() error
}

// Steps remembers which steps of a set-up are done, so that a set-up tried
// again after an error resumes at the steps that failed. Under faults
// each step is a request or two that can wait out the client's timeout
// (a stream without a leader); run one after another, an orchestrator
// restarted in a chaos run's outage met one leaderless stream after
// another, 5 s each, and served nothing for up to a minute. The zero
// value is ready to use; it is not safe for concurrent use.
type Steps struct {
	done map[string]bool
}

// Run runs the steps not done yet, up to limit at once, and marks those
// that succeed done. It returns an error that stops the process if any
// step had one (ErrFewerReplicas, ErrPermanent: Retry gives up on it),
// else the first step's error in order, or nil when all are done.
func (s *Steps) Run(steps []Step, limit int) error {
	if s.done == nil {
		s.done = make(map[string]bool)
	}
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(limit, 1))
	for i, st := range steps {
		if s.done[st.Name] {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = st.Run()
		})
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		if err == nil {
			s.done[steps[i].Name] = true
			continue
		}
		if errors.Is(err, ErrFewerReplicas) || errors.Is(err, ErrPermanent) {
			return err
		}
		first = cmp.Or(first, err)
	}
	return first
}

// Done reports whether the step name is done.
func (s *Steps) Done(name string) bool { return s.done[name] }
