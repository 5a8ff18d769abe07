// Package demo is the workload `ax dev` runs: handlers for a few task types,
// a graph that exercises every feature, and a live progress display.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ax-run/ax/executor"
	"github.com/ax-run/ax/task"
)

// Task types the demo handlers serve.
const (
	TypeNoop  = "demo.noop"
	TypeSleep = "demo.sleep"
	TypeFlaky = "demo.flaky"
	TypeFail  = "demo.fail"
	// TypeGather reads how its upstreams (depends_on) ended through
	// executor.Job.Inputs and returns a GatherResult: a dependent that
	// uses the results flowing down the DAG.
	TypeGather = "demo.gather"
	// TypeSplit is shardable: its planner splits a range into shards, each
	// shard sums its part, the aggregator adds the parts up.
	TypeSplit = "demo.split"
)

// Params is the payload the demo handlers understand.
type Params struct {
	// Sleep is how long demo.sleep (and demo.flaky) work, e.g. "300ms".
	Sleep string `json:"sleep,omitempty"`
	// FailTimes is how many first attempts of demo.flaky fail.
	FailTimes int `json:"fail_times,omitempty"`
	// Label is echoed in the result.
	Label string `json:"label,omitempty"`
	// Shards is how many shards demo.split plans; each sums the numbers
	// 0…Size-1 of its part of the range.
	Shards int `json:"shards,omitempty"`
	Size   int `json:"size,omitempty"`
	// Pad adds a "pad" of that many bytes to the result of demo.sleep and
	// demo.flaky: a result over task.InlineResultLimit is stored as an
	// object.
	Pad int `json:"pad,omitempty"`
}

// SplitResult is what demo.split's aggregator returns.
type SplitResult struct {
	Sum       int `json:"sum"`
	Shards    int `json:"shards"`
	Succeeded int `json:"succeeded"`
}

// GatherResult is what demo.gather returns: its label and, for each
// upstream in depends_on order, how it ended and the label its result
// carried (demo.sleep, demo.flaky and demo.gather results have one).
type GatherResult struct {
	Label  string        `json:"label,omitempty"`
	Inputs []GatherInput `json:"inputs"`
}

// GatherInput is one upstream as demo.gather saw it.
type GatherInput struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Label is the "label" of the upstream's result, when it succeeded
	// with one.
	Label string `json:"label,omitempty"`
}

// splitPart is one demo.split shard's payload.
type splitPart struct {
	From  int    `json:"from"`
	To    int    `json:"to"`
	Sleep string `json:"sleep,omitempty"`
}

// Register installs the demo handlers on an executor.
func Register(ex *executor.Executor) {
	ex.HandleFunc(TypeNoop, func(context.Context, *executor.Job) (any, error) { return nil, nil })
	registerSteps(ex)
	ex.HandleFunc(TypeSleep, func(ctx context.Context, j *executor.Job) (any, error) {
		p, err := params(j)
		if err != nil {
			return nil, err
		}
		if err := sleep(ctx, p.Sleep); err != nil {
			return nil, err
		}
		return padded(p, map[string]any{"label": p.Label, "slept": p.Sleep, "executor_attempt": j.Attempt}), nil
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
		return padded(p, map[string]any{"label": p.Label, "succeeded_on_attempt": j.Attempt}), nil
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
	ex.HandleFunc(TypeGather, gather)
	registerSplit(ex)
}

// gather is demo.gather's handler.
func gather(ctx context.Context, j *executor.Job) (any, error) {
	p, err := params(j)
	if err != nil {
		return nil, err
	}
	ins, err := j.Inputs(ctx)
	if err != nil {
		return nil, fmt.Errorf("read inputs: %w", err)
	}
	r := GatherResult{Label: p.Label, Inputs: make([]GatherInput, 0, len(ins))}
	for _, in := range ins {
		g := GatherInput{ID: in.ID, State: string(in.State)}
		if in.State == task.Succeeded {
			var res struct {
				Label string `json:"label"`
			}
			raw, err := j.UpstreamResultRaw(ctx, in.ID)
			if err != nil {
				return nil, fmt.Errorf("result of upstream %s: %w", in.ID, err)
			}
			if len(raw) > 0 && string(raw) != "null" {
				if err := json.Unmarshal(raw, &res); err != nil {
					return nil, executor.Permanent(fmt.Errorf("result of upstream %s: %w", in.ID, err))
				}
			}
			g.Label = res.Label
		}
		r.Inputs = append(r.Inputs, g)
	}
	return r, nil
}

// registerSplit installs demo.split: plan → shards → aggregate.
func registerSplit(ex *executor.Executor) {
	ex.HandleShards(TypeSplit, executor.Sharded{
		Plan: func(_ context.Context, j *executor.Job) ([]executor.Shard, error) {
			p, err := params(j)
			if err != nil {
				return nil, err
			}
			shards := make([]executor.Shard, p.Shards)
			for i := range shards {
				shards[i].Payload = splitPart{From: i * p.Size, To: (i + 1) * p.Size, Sleep: p.Sleep}
			}
			return shards, nil
		},
		Shard: func(ctx context.Context, j *executor.Job) (any, error) {
			var part splitPart
			if err := json.Unmarshal(j.Payload, &part); err != nil {
				return nil, executor.Permanent(fmt.Errorf("bad shard payload: %w", err))
			}
			if err := sleep(ctx, part.Sleep); err != nil {
				return nil, err
			}
			sum := 0
			for n := part.From; n < part.To; n++ {
				sum += n
			}
			return sum, nil
		},
		Aggregate: func(_ context.Context, _ *executor.Job, s *executor.ShardOutcomes) (any, error) {
			r := SplitResult{Shards: len(s.Shards), Succeeded: s.Succeeded}
			for _, o := range s.Shards {
				var part int
				if err := json.Unmarshal(o.Result, &part); err != nil && o.State == "succeeded" {
					return nil, fmt.Errorf("shard %s result %s: %w", o.ID, o.Result, err)
				}
				r.Sum += part
			}
			return r, nil
		},
	})
}

// padded adds p.Pad bytes to a result.
func padded(p Params, result map[string]any) map[string]any {
	if p.Pad > 0 {
		result["pad"] = strings.Repeat("p", p.Pad)
	}
	return result
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
