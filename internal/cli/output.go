package cli

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/topology"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// The -o json contract: every command that prints data prints one JSON
// value; keys are snake_case (every type printed has json tags), a list or
// map that is empty prints as [] or {} and never null, an absent time is
// left out (never 0001-01-01T00:00:00Z), and a command that fails prints
// {"error": {"code": …, "message": …}} on stdout — nothing else — and
// exits 1. The code names the cause, the same for every command
// (errorCodes).

// jsonError is what a failing command prints with -o json.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

type jsonErrorBody struct {
	// Code names the cause (errorCodes).
	Code string `json:"code"`
	// Message is the error as the table output prints it.
	Message string `json:"message"`
}

// The error codes of -o json, one per cause.
const (
	// codeInvalid: the command line or its input is wrong (an unknown
	// command or flag, a missing or extra argument, a spec, graph, id,
	// type, schedule or limit that does not validate).
	codeInvalid = "invalid"
	// codeNotFound: the task, schedule, dead letter or poison message
	// named does not exist (or the mirror's consumer, for ax mirror lag
	// before any mirror ran).
	codeNotFound = "not_found"
	// codeConflict: what it names is in no state for the command
	// (cancelling a task that ended, re-driving one that did not fail).
	codeConflict = "conflict"
	// codeRejected: the orchestrator refused the submission (ax submit
	// --wait); the message says why.
	codeRejected = "rejected"
	// codeNoTopology: the server answers but AX's streams do not exist
	// there (no orchestrator ever ran against it); the message names it.
	codeNoTopology = "no_topology"
	// codeUnavailable: no NATS server answers (or JetStream does not).
	codeUnavailable = "unavailable"
	// codePermission: the NATS user may not do it (deploy/security).
	codePermission = "permission_denied"
	// codeTimeout: the command's time ran out (its command stays queued).
	codeTimeout = "timeout"
	// codeError: any other failure.
	codeError = "error"
)

// errUsage marks an error in the command line itself (codeInvalid).
var errUsage = errors.New("usage")

// usageError wraps err as an error in the command line.
func usageError(err error) error {
	if err == nil || errors.Is(err, errUsage) {
		return err
	}
	return &usage{err}
}

type usage struct{ err error }

func (u *usage) Error() string        { return u.err.Error() }
func (u *usage) Unwrap() []error      { return []error{u.err, errUsage} }
func (u *usage) Is(target error) bool { return target == errUsage }

// errorCode is the -o json code of err.
func errorCode(err error) string {
	var rejected *sdk.RejectedError
	var invalid *task.ValidationError
	switch {
	case errors.As(err, &rejected):
		return codeRejected
	case errors.Is(err, errUsage), errors.Is(err, sdk.ErrInvalid), errors.As(err, &invalid):
		return codeInvalid
	case errors.Is(err, sdk.ErrNotFound), errors.Is(err, sdk.ErrScheduleNotFound), errors.Is(err, jetstream.ErrMsgNotFound),
		errors.Is(err, jetstream.ErrConsumerNotFound):
		return codeNotFound
	case errors.Is(err, sdk.ErrConflict):
		return codeConflict
	case errors.Is(err, topology.ErrMissing):
		return codeNoTopology
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired):
		return codePermission
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrJetStreamNotEnabled):
		return codeUnavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return codeTimeout
	}
	return codeError
}

// errorJSON returns the JSON error object for err.
func errorJSON(err error) jsonError {
	return jsonError{Error: jsonErrorBody{Code: errorCode(err), Message: err.Error()}}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// emptyNotNull returns a copy of v in which every nil slice and nil map
// reachable through exported fields, pointers, interfaces, slices and maps
// is empty instead, so it encodes as [] or {}. Values that marshal
// themselves (time.Time, json.RawMessage, durations) are kept as they are.
func emptyNotNull(v any) any {
	if v == nil {
		return nil
	}
	return fill(reflect.ValueOf(v), 0).Interface()
}

func fill(v reflect.Value, depth int) reflect.Value {
	if depth > 32 {
		panic(fmt.Sprintf("cli: JSON output nested deeper than 32 levels (%s)", v.Type()))
	}
	t := v.Type()
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return v
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(fill(v.Elem(), depth+1))
		return p
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t).Elem()
		out.Set(fill(v.Elem(), depth+1))
		return out
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return v // []byte encodes as a base64 string
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(fill(v.Index(i), depth+1))
		}
		return out
	case reflect.Map:
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), fill(it.Value(), depth+1))
		}
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		out.Set(v)
		for i := range t.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(fill(v.Field(i), depth+1))
			}
		}
		return out
	}
	return v
}
