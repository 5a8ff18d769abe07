package codec_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/codec"
	"github.com/ax-run/ax/task"
)

// TestSameJSONAsEncodingJSON: the codec's bytes decode with encoding/json
// to the same value and back, for every message it carries.
func TestSameJSONAsEncodingJSON(t *testing.T) {
	s, err := task.New("demo.x", json.RawMessage(`{"a":[1,2,{"b":"é\u2028"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s.ID, s.DependsOn, s.Timeout = "T1", []string{"A", "B"}, task.Duration(90*time.Second)
	now := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
	rec := task.Task{Spec: s, State: task.Retrying, Attempt: 2, ExecutionID: "x1", RetryAt: &now, SubmittedAt: now, UpdatedAt: now,
		Result: json.RawMessage(`{"ok":true}`), HasDependents: true}
	rec.AddError(task.AttemptError{Attempt: 1, ExecutionID: "x0", Error: "boom <&>", At: now})
	dur := task.Duration(time.Second)
	for _, v := range []any{
		task.Event{Kind: task.KindTransition, From: task.Running, To: task.Retrying, At: now, Actor: "n1", Reason: "r", Task: rec},
		task.Dispatch{Task: rec, Revision: 42},
		task.Report{ID: "T1", Type: "demo.x", ExecutionID: "x1", Attempt: 2, Status: task.OutcomeFailed, Error: "e", RetryAfter: &dur, StartedAt: now, FinishedAt: now},
	} {
		got, err := codec.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(v)
		back := reflect.New(reflect.TypeOf(v))
		if err := json.Unmarshal(got, back.Interface()); err != nil {
			t.Fatalf("%T: encoding/json cannot read the codec's %s: %v", v, got, err)
		}
		again, _ := json.Marshal(back.Elem().Interface())
		if string(again) != string(want) {
			t.Fatalf("%T: round trip through the codec differs:\n%s\n%s", v, again, want)
		}
		dec := reflect.New(reflect.TypeOf(v))
		if err := codec.Unmarshal(want, dec.Interface()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dec.Elem().Interface(), back.Elem().Interface()) {
			t.Fatalf("%T: codec decodes encoding/json's bytes differently", v)
		}
	}
}
