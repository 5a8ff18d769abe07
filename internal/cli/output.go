package cli

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/ax-run/ax/sdk"
)

// The -o json contract: keys are snake_case (every type printed has json
// tags), a list or map that is empty prints as [] or {} and never null,
// and a command that fails prints {"error": {...}} on stdout and exits
// non-zero.

// jsonError is what a failing command prints with -o json.
type jsonError struct {
	Error jsonErrorBody `json:"error"`
}

type jsonErrorBody struct {
	// Code is "not_found" for a task, schedule or dead letter that does not
	// exist, "error" otherwise.
	Code string `json:"code"`
	// Message is the error as the table output prints it.
	Message string `json:"message"`
}

// errorJSON returns the JSON error object for err.
func errorJSON(err error) jsonError {
	code := "error"
	if errors.Is(err, sdk.ErrNotFound) {
		code = "not_found"
	}
	return jsonError{Error: jsonErrorBody{Code: code, Message: err.Error()}}
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
