package sdk

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ax-run/ax/task"
)

// SubmitTyped submits a task of taskType whose payload is args encoded as
// JSON: the producer's side of executor.HandleTyped. opts, when not nil,
// gives every other field of the spec (id, priority, dependencies…; its
// Type and Payload are replaced); nil means task.New's defaults. It is a
// function, not a method, because Go methods cannot have type parameters.
func SubmitTyped[T any](ctx context.Context, c *Client, taskType string, args T, opts *task.Spec) (string, error) {
	spec, err := typedSpec(taskType, args, opts)
	if err != nil {
		return "", err
	}
	return c.Submit(ctx, spec)
}

// SubmitArgs submits args as a task of the type its Kind names: the
// producer's side of executor.HandleArgs. opts is as for SubmitTyped.
func SubmitArgs[T task.Args](ctx context.Context, c *Client, args T, opts *task.Spec) (string, error) {
	return SubmitTyped(ctx, c, args.Kind(), args, opts)
}

// typedSpec builds the spec of a typed submission.
func typedSpec[T any](taskType string, args T, opts *task.Spec) (task.Spec, error) {
	if opts == nil {
		return task.New(taskType, args)
	}
	spec := *opts
	payload, err := json.Marshal(args)
	if err != nil {
		return spec, fmt.Errorf("encode payload of %s task: %w", taskType, err)
	}
	spec.Type, spec.Payload = taskType, payload
	return spec, nil
}
