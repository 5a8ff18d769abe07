package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ax-run/ax/internal/inputs"
	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// ErrNotUpstream is returned (wrapped) by Job.Input and Job.UpstreamResult
// for an id that is not in the task's depends_on.
var ErrNotUpstream = inputs.ErrNotUpstream

// ErrUpstreamNotSucceeded is returned (wrapped) by Job.UpstreamResult for
// an upstream that did not succeed: under the trigger rules all_ended and
// any_failed a task runs after such upstreams (see Job.Inputs for how each
// ended).
var ErrUpstreamNotSucceeded = inputs.ErrNotSucceeded

// ErrDigestMismatch is returned (wrapped) when an object read back (an
// upstream's or a shard's large result) is not the bytes its executor
// reported: it was overwritten after the report. The error names the
// object and its store.
var ErrDigestMismatch = object.ErrDigestMismatch

// jobInputs reads a job's inputs when its handler asks, once per attempt:
// from the orchestrators (executors do not read task records), for the
// holder of the execution's token.
type jobInputs struct {
	read    func(ctx context.Context) ([]task.Input, error)
	objects *object.Stores

	mu     sync.Mutex
	inputs []task.Input // nil until read
}

// bindInputs gives job its task's upstreams and the means to read them.
// Nothing is read until the handler asks.
func (e *Executor) bindInputs(job *Job, t task.Task, token string) {
	job.DependsOn = t.DependsOn
	// The request, not the task: the closure lives as long as the job.
	req := task.InputsRequest{ID: t.ID, ExecutionID: t.ExecutionID, Token: token}
	capability, upstreams := t.Capability, len(t.DependsOn)
	job.inputs = &jobInputs{objects: e.objects, read: func(ctx context.Context) ([]task.Input, error) {
		return e.askInputs(ctx, req, capability, upstreams)
	}}
}

// askInputs asks the orchestrators for the inputs of a task of a
// capability with that many upstreams (req on ax.inputs.<capability>).
func (e *Executor) askInputs(ctx context.Context, req task.InputsRequest, capability string, upstreams int) ([]task.Input, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := e.nc.RequestWithContext(ctx, subject.Inputs(capability), data)
	if err != nil {
		return nil, fmt.Errorf("ask the orchestrators: %w", err)
	}
	var rep task.InputsReply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return nil, fmt.Errorf("unreadable reply: %w", err)
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	if len(rep.Inputs) != upstreams {
		return nil, fmt.Errorf("the orchestrator answered %d inputs for %d upstreams", len(rep.Inputs), upstreams)
	}
	return rep.Inputs, nil
}

// Inputs returns how each upstream of the task (job.DependsOn, in that
// order) ended: its state, reason and result — inline up to
// task.InlineResultLimit, otherwise a reference (Input.ResultObject) that
// UpstreamResult reads. The records are read on the first call (from the
// stream leader) and kept for the rest of the attempt; a handler that never
// calls it costs nothing. A task without depends_on has no inputs.
func (j *Job) Inputs(ctx context.Context) ([]task.Input, error) {
	if len(j.DependsOn) == 0 {
		return nil, nil
	}
	if j.inputs == nil {
		return nil, fmt.Errorf("inputs of %s: the job was not made by an executor", j.ID)
	}
	j.inputs.mu.Lock()
	defer j.inputs.mu.Unlock()
	if j.inputs.inputs == nil {
		read, err := j.inputs.read(ctx)
		if err != nil {
			return nil, fmt.Errorf("inputs of %s: %w", j.ID, err)
		}
		j.inputs.inputs = read
	}
	return slices.Clone(j.inputs.inputs), nil
}

// Input returns how the upstream id ended (see Inputs); an id not in
// job.DependsOn is an error wrapping ErrNotUpstream.
func (j *Job) Input(ctx context.Context, id string) (task.Input, error) {
	i := slices.Index(j.DependsOn, id)
	if i < 0 {
		return task.Input{}, fmt.Errorf("input %s of %s: %w", id, j.ID, ErrNotUpstream)
	}
	all, err := j.Inputs(ctx)
	if err != nil {
		return task.Input{}, err
	}
	return all[i], nil
}

// UpstreamResult decodes the result of the upstream id (JSON) into v,
// reading it from the object store when it was larger than
// task.InlineResultLimit (checked against the digest its executor
// reported: an object overwritten since is an error wrapping
// ErrDigestMismatch). An upstream that did not succeed is an error
// wrapping ErrUpstreamNotSucceeded; an id not in job.DependsOn one
// wrapping ErrNotUpstream. A nil v only checks that the result is there.
func (j *Job) UpstreamResult(ctx context.Context, id string, v any) error {
	raw, err := j.UpstreamResultRaw(ctx, id)
	if err != nil || v == nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode result of upstream %s into %T: %w", id, v, err)
	}
	return nil
}

// UpstreamResultRaw returns the result of the upstream id as JSON (see
// UpstreamResult).
func (j *Job) UpstreamResultRaw(ctx context.Context, id string) (json.RawMessage, error) {
	in, err := j.Input(ctx, id)
	if err != nil {
		return nil, err
	}
	raw, err := inputs.Result(ctx, j.inputs.objects, in)
	if err != nil {
		return nil, fmt.Errorf("input %s of %s: %w", id, j.ID, err)
	}
	return raw, nil
}
