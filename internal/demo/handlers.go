// Package demo is the workload `ax dev` runs: handlers for a few task types,
// a graph that exercises every feature, and a live progress display.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-run/ax/executor"
)

// Task types the demo handlers serve.
const (
	TypeNoop  = "demo.noop"
	TypeSleep = "demo.sleep"
	TypeFlaky = "demo.flaky"
	TypeFail  = "demo.fail"
)

// Params is the payload the demo handlers understand.
type Params struct {
	// Sleep is how long demo.sleep (and demo.flaky) work, e.g. "300ms".
	Sleep string `json:"sleep,omitempty"`
	// FailTimes is how many first attempts of demo.flaky fail.
	FailTimes int `json:"fail_times,omitempty"`
	// Label is echoed in the result.
	Label string `json:"label,omitempty"`
}

// Register installs the demo handlers on an executor.
func Register(ex *executor.Executor) {
	ex.HandleFunc(TypeNoop, func(context.Context, *executor.Job) (any, error) { return nil, nil })
	ex.HandleFunc(TypeSleep, func(ctx context.Context, j *executor.Job) (any, error) {
		p, err := params(j)
		if err != nil {
			return nil, err
		}
		if err := sleep(ctx, p.Sleep); err != nil {
			return nil, err
		}
		return map[string]any{"label": p.Label, "slept": p.Sleep, "executor_attempt": j.Attempt}, nil
	})
	ex.HandleFunc(TypeFlaky, func(ctx context.Context, j *executor.Job) (any, error) {
		p, err := params(j)
		if err != nil {
			return nil, err
		}
		if err := sleep(ctx, p.Sleep); err != nil {
			return nil, err
		}
		if j.Attempt <= p.FailTimes {
			return nil, fmt.Errorf("simulated failure %d of %d", j.Attempt, p.FailTimes)
		}
		return map[string]any{"label": p.Label, "succeeded_on_attempt": j.Attempt}, nil
	})
	ex.HandleFunc(TypeFail, func(ctx context.Context, j *executor.Job) (any, error) {
		p, err := params(j)
		if err != nil {
			return nil, err
		}
		if err := sleep(ctx, p.Sleep); err != nil {
			return nil, err
		}
		return nil, errors.New("simulated downstream outage: connection refused")
	})
}

func params(j *executor.Job) (Params, error) {
	var p Params
	if len(j.Payload) > 0 {
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return p, executor.Permanent(fmt.Errorf("bad payload: %w", err))
		}
	}
	return p, nil
}

func sleep(ctx context.Context, s string) error {
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return executor.Permanent(fmt.Errorf("bad sleep %q: %w", s, err))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
