package wirejson_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/wirejson"
	"github.com/ax-run/ax/task"
)

// The messages wirejson carries, each as a fresh value to decode into.
var messages = map[string]func() any{
	"event":        func() any { return new(task.Event) },
	"dispatch":     func() any { return new(task.Dispatch) },
	"report":       func() any { return new(task.Report) },
	"direct batch": func() any { return new(task.DirectBatch) },
	"batch reply":  func() any { return new(task.DirectBatchReply) },
	"lease":        func() any { return new(task.Lease) },
	"claim":        func() any { return new(task.ClaimRequest) },
	"spec":         func() any { return new(task.Spec) },
}

// Strings that encoders escape differently when they get it wrong: HTML,
// line and paragraph separators, control bytes, invalid UTF-8.
var awkward = []string{"", "plain", "<a href=\"x\">&amp;</a>", "line\u2028para\u2029", "tab\tnul\x00bell\x07", "bad \xff\xfe utf-8", "é中😀", `\"quoted\\`}

// fill sets every field of v (settable), recursively, from seed: each
// string one of awkward, numbers large and negative, pointers and slices
// set, JSON values valid.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type() == reflect.TypeFor[*time.Time]() || v.Type().Elem().Kind() != reflect.Pointer {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), seed+1)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 3, 6, 0, seed%60, seed*1_000_003, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed+i)
			}
		}
	case reflect.String:
		v.SetString(awkward[seed%len(awkward)])
	case reflect.Bool:
		v.SetBool(seed%2 == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed*7919) - 40_000)
		if v.Type().Size() == 8 && seed%3 == 0 {
			v.SetInt(1<<62 + int64(seed))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed * 104729 % 200))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) / 3)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes(fmt.Appendf(nil, "{\"n\": %d,\n \"s\":\"<%s>\u2028\", \"a\":[1, 2.5e3,null , true]}", seed, "x&y"))
			return
		}
		n := 1 + seed%3
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range n {
			fill(v.Index(i), seed+i)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for i := range 1 + seed%3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, seed+i)
			fill(e, seed+i)
			v.SetMapIndex(k, e)
		}
	}
}

// TestSameJSONAsTheStandardLibrary: for every message, filled in many
// ways, wirejson writes the very bytes encoding/json writes, and each
// reads the other's output into equal values.
func TestSameJSONAsTheStandardLibrary(t *testing.T) {
	for name, zero := range messages {
		for seed := range 40 {
			v := zero()
			fill(reflect.ValueOf(v).Elem(), seed)
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s %d: encoding/json: %v", name, seed, err)
			}
			got, err := wirejson.Marshal(v)
			if err != nil {
				t.Fatalf("%s %d: wirejson: %v", name, seed, err)
			}
			if string(got) != string(want) {
				t.Fatalf("%s %d: wirejson wrote\n%s\nencoding/json\n%s", name, seed, got, want)
			}
			a, b := zero(), zero()
			if err := json.Unmarshal(want, a); err != nil {
				t.Fatalf("%s %d: encoding/json reads back: %v", name, seed, err)
			}
			if err := wirejson.Unmarshal(want, b); err != nil {
				t.Fatalf("%s %d: wirejson reads back: %v", name, seed, err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %d: read differently:\nencoding/json %+v\nwirejson      %+v", name, seed, a, b)
			}
		}
	}
}

// FuzzSameDecoding: any input decodes the same way with both — both
// refuse it, or both read equal values — so a malformed or hostile
// message is treated as before; but for timestamps that the standard
// library's lenient parser accepts and wirejson refuses.
func FuzzSameDecoding(f *testing.F) {
	for _, zero := range messages {
		v := zero()
		fill(reflect.ValueOf(v).Elem(), 3)
		data, _ := json.Marshal(v)
		f.Add(data)
	}
	for _, s := range []string{`{}`, `null`, `[]`, `{"task":{"state":1}}`, `{"attempt":"1"}`, `{"attempt":1e400}`, `{"at":"yesterday"}`, `{"id":"a","id":"b"}`, `{"ID":"upper"}`, `{"result":{"a":}`, "{\"id\":\"\xff\"}", `{"retry_after":"-5s"}`, `{"messages":[1,{"a":2},"x"]}`, ` {"id":"x"} `, `{"id":"x"} {}`} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"result":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, zero := range messages {
			a, b := zero(), zero()
			errA, errB := json.Unmarshal(data, a), wirejson.Unmarshal(data, b)
			if errA == nil && errB != nil && strings.Contains(errB.Error(), "of type time.Time") {
				// Stricter about timestamps (see the package doc).
				continue
			}
			if (errA == nil) != (errB == nil) {
				t.Fatalf("%s %q: encoding/json: %v, wirejson: %v", name, data, errA, errB)
			}
			if errA == nil && !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %q: read differently:\nencoding/json %+v\nwirejson      %+v", name, data, a, b)
			}
		}
	})
}

// TestDeepNestingAsTheStandardLibrary: nesting deeper than encoding/json
// allows is refused with its error, whatever the message and wherever the
// nesting (a report's result, a spec's payload, a batch's messages);
// nesting it allows is read alike.
func TestDeepNestingAsTheStandardLibrary(t *testing.T) {
	for _, n := range []int{100, 9899, 9900, 10000, 10001, 20000, 200000} {
		nest := strings.Repeat("[", n) + strings.Repeat("]", n)
		for _, data := range []string{
			`{"id":"a","result":` + nest + `}`,
			`{"id":"a","payload":` + nest + `}`,
			`{"messages":[` + nest + `]}`,
			`{"id":"a","reason":"` + strings.Repeat("[", n) + `"}`, // in a string: no nesting
		} {
			for name, zero := range messages {
				a, b := zero(), zero()
				errA, errB := json.Unmarshal([]byte(data), a), wirejson.Unmarshal([]byte(data), b)
				if fmt.Sprint(errA) != fmt.Sprint(errB) || errA == nil && !reflect.DeepEqual(a, b) {
					t.Fatalf("%s, depth %d, %.40s…: encoding/json %v, wirejson %v", name, n, data, errA, errB)
				}
			}
		}
	}
}
