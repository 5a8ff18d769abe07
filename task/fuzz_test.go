package task_test

// Fuzz targets for the parsers of untrusted input in the task model: what a
// producer submits (specs, graphs, schedules), what an executor reports
// (reports, plans) and what an operator sends (command bodies). Each
// asserts no panic and bounded behaviour: validation errors are
// *task.ValidationError (possibly wrapped), and whatever is accepted
// respects the limits. The seeds below run with every `go test`; scripts/test
// fuzzes each target for a few seconds.

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ax-run/ax/task"
)

// fuzzMaxPayload keeps the limit small so the fuzzer reaches it.
const fuzzMaxPayload = 64

var specSeeds = []string{
	`{"id":"a1","type":"t","payload":{"x":1}}`,
	`{"id":"a1","type":"email.send","priority":0,"max_retries":0,"timeout":"2s","estimated_cost":0.5}`,
	`{"id":"a1","type":"t","depends_on":["b","c"],"capability":"gpu","delay":"1m","ttl":"1h"}`,
	`{"id":"a1","type":"t","run_at":"2026-11-30T10:00:00Z","deadline":"2026-12-01T00:00:00Z"}`,
	`{"id":"a1","type":"t","shardable":true,"max_parallel_shards":10,"min_shard_success":0.95}`,
	`{"id":"a1","type":"t","dispatch_timeout":"30s","max_dispatches":5,"dependency_timeout":"5m"}`,
	`{"id":"a/shard/1","type":"t"}`,
	`{"id":"a1","type":"t","timeout":"-1s"}`,
	`{"id":"a1","type":"t","payload":"` + strings.Repeat("x", 80) + `"}`,
	`{"id":"a1","type":"t","estimated_cost":1e308}`,
	`{"id":"a1","type":"t","timeout":"9223372036854775807ns"}`,
	`{"id":"a1","type":"t","unknown":1}`,
	`{"id":"a1","type":"t"} {}`,
	`{"id":1}`,
	`{"id":"a1","type":"t","run_at":"2026-11-30T10:00:00,5Z"}`,
	`{"ID":"a1","Type":"t","PAYLOAD":[1]}`,
	`{"id":"a1","type":"t"}}`,
	`{"id":"a1","type":"t","id":"a2"}`,
	`null`,
	`{"id":"a1","type":"t","payload":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`[]`,
	``,
}

func FuzzDecodeSpec(f *testing.F) {
	for _, s := range specSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := task.DecodeSpec(data)
		// The fast path decides exactly as the standard library would.
		std, stdErr := task.DecodeSpecStd(data)
		if fmt.Sprint(err) != fmt.Sprint(stdErr) || !reflect.DeepEqual(s, std) {
			t.Fatalf("%q: DecodeSpec gives %+v, %v; the standard library %+v, %v", data, s, err, std, stdErr)
		}
		if err != nil {
			return
		}
		if err := s.Validate(fuzzMaxPayload); err != nil {
			var ve *task.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate returned %T %v, want a *ValidationError", err, err)
			}
			return
		}
		checkAccepted(t, s)
		// What was accepted survives the round trip through the wire form.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal accepted spec: %v", err)
		}
		again, err := task.DecodeSpec(b)
		if err != nil {
			t.Fatalf("accepted spec does not decode again: %v\n%s", err, b)
		}
		if err := again.Validate(fuzzMaxPayload); err != nil {
			t.Fatalf("accepted spec is invalid after a round trip: %v\n%s", err, b)
		}
		if again.ID != s.ID || again.Type != s.Type || again.PriorityLevel() != s.PriorityLevel() || len(again.DependsOn) != len(s.DependsOn) {
			t.Fatalf("round trip changed the spec:\n%+v\n%+v", s, again)
		}
	})
}

// checkAccepted asserts the limits every accepted spec respects.
func checkAccepted(t *testing.T, s task.Spec) {
	t.Helper()
	switch {
	case !task.ValidID(s.ID) || strings.Contains(s.ID, task.ShardSeparator):
		t.Fatalf("accepted id %q", s.ID)
	case !task.ValidType(s.Type) || !task.ValidCapability(s.Capability):
		t.Fatalf("accepted type %q capability %q", s.Type, s.Capability)
	case s.PriorityLevel() < 0 || s.PriorityLevel() > task.MaxPriority:
		t.Fatalf("accepted priority %d", s.PriorityLevel())
	case len(s.Payload) > fuzzMaxPayload || (len(s.Payload) > 0 && !json.Valid(s.Payload)):
		t.Fatalf("accepted payload of %d bytes", len(s.Payload))
	case len(s.DependsOn) > task.MaxDependencies:
		t.Fatalf("accepted %d dependencies", len(s.DependsOn))
	case s.RetryLimit() < 0 || s.RetryLimit() > task.MaxRetriesLimit:
		t.Fatalf("accepted max_retries %d", s.RetryLimit())
	case s.Timeout <= 0 || !(s.EstimatedCost > 0):
		t.Fatalf("accepted timeout %v cost %v", s.Timeout, s.EstimatedCost)
	case s.MaxParallelShards < 0 || s.MaxParallelShards > task.MaxShards:
		t.Fatalf("accepted max_parallel_shards %d", s.MaxParallelShards)
	}
	if s.Shardable && len(s.ID) > task.MaxShardableIDLen {
		t.Fatalf("accepted shardable id of %d characters", len(s.ID))
	}
	for _, d := range s.DependsOn {
		if !task.ValidID(d) || d == s.ID {
			t.Fatalf("accepted dependency %q", d)
		}
	}
}

func FuzzDecodeGraph(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a"]}]}`,
		`{"tasks":[{"id":"a","type":"t","depends_on":["b"]},{"id":"b","type":"t","depends_on":["a"]}]}`,
		`{"tasks":[{"id":"a","type":"t","depends_on":["c","outside"]},{"id":"b","type":"t","depends_on":["a"]},{"id":"c","type":"t"}]}`,
		`{"tasks":[{"id":"a","type":"t"},{"id":"a","type":"t"}]}`,
		`{"tasks":[]}`,
		`{"tasks":[{"id":"a","type":"t","x":1}]}`,
		`{"tasks":null}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := task.DecodeGraph(data)
		if err != nil {
			return
		}
		sorted, err := g.Sorted(fuzzMaxPayload)
		if err != nil {
			var ve *task.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Sorted returned %T %v, want a *ValidationError", err, err)
			}
			return
		}
		if len(sorted) != len(g.Tasks) || len(sorted) > task.MaxGraphTasks {
			t.Fatalf("sorted %d of %d tasks", len(sorted), len(g.Tasks))
		}
		pos := make(map[string]int, len(sorted))
		for i, s := range sorted {
			checkAccepted(t, s)
			if _, dup := pos[s.ID]; dup {
				t.Fatalf("id %q twice in the sorted graph", s.ID)
			}
			pos[s.ID] = i
		}
		for i, s := range sorted {
			for _, d := range s.DependsOn {
				if j, in := pos[d]; in && j >= i {
					t.Fatalf("%q comes before its upstream %q", s.ID, d)
				}
			}
		}
	})
}

func FuzzScheduleDefinition(f *testing.F) {
	for _, s := range []string{
		`{"cron":"0 2 * * *","time_zone":"Europe/Berlin","template":{"type":"report.build"}}`,
		`{"cron":"@every 5m","overlap":"allow","catch_up":true,"template":{"type":"t","ttl":"1h"}}`,
		`{"cron":"@daily","template":{"type":"t","depends_on":["x"]}}`,
		`{"cron":"","template":{"type":"t"}}`,
		`{"cron":"* * * * *","overlap":"sometimes","template":{"type":"t"}}`,
		`{"cron":"* * * * *","template":{"type":"t","payload":"` + strings.Repeat("y", 80) + `"}}`,
	} {
		f.Add("nightly", []byte(s))
	}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		var s task.Schedule
		if json.Unmarshal(data, &s) != nil {
			return
		}
		s.Name = name // the command subject's id, as the orchestrator does
		err := s.ValidateDefinition(fuzzMaxPayload)
		if err != nil {
			var ve *task.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateDefinition returned %T %v, want a *ValidationError", err, err)
			}
			return
		}
		if !task.ValidCapability(s.Name) || s.Cron == "" || len(s.Template.DependsOn) > 0 || len(s.Template.Payload) > fuzzMaxPayload {
			t.Fatalf("accepted schedule %+v", s)
		}
	})
}

func FuzzReport(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","type":"t","execution_id":"e1","attempt":1,"status":"succeeded","result":{"ok":true},"executor":"x"}`,
		`{"id":"a","type":"t","execution_id":"e1","attempt":2,"status":"failed","error":"boom","permanent":true,"retry_after":"5s"}`,
		`{"id":"a","type":"t","execution_id":"e1","status":"succeeded","plan":{"object":"plans/a/e1","shards":3,"aggregate":true}}`,
		`{"id":"a","execution_id":"e1","status":"failed","error":"` + strings.Repeat("é", 3000) + `"}`,
		`{"id":"a","execution_id":"e1","status":"weird","retry_after":"-1h"}`,
		`{"id":"","execution_id":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// As the orchestrator decodes a report (orchestrator/report.go).
		var r task.Report
		if err := json.Unmarshal(data, &r); err != nil || r.ID == "" || r.ExecutionID == "" {
			return
		}
		e := task.TruncateError(r.Error)
		if len(e) > task.MaxErrorBytes {
			t.Fatalf("truncated error has %d bytes, limit %d", len(e), task.MaxErrorBytes)
		}
		if utf8.ValidString(r.Error) && !utf8.ValidString(e) {
			t.Fatalf("truncation split a UTF-8 sequence")
		}
		if len(r.Error) <= task.MaxErrorBytes && e != r.Error {
			t.Fatalf("an error within the limit was changed")
		}
	})
}

func FuzzPlan(f *testing.F) {
	for _, s := range []string{
		`{"shards":[{"payload":{"from":0,"to":10}},{"priority":0,"capability":"gpu","estimated_cost":2}]}`,
		`{"shards":[{"priority":9}]}`,
		`{"shards":[{"capability":"a.b"}]}`,
		`{"shards":[{"estimated_cost":-1}]}`,
		`{"shards":[]}`,
	} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, data []byte, shards int) {
		var p task.Plan
		if json.Unmarshal(data, &p) != nil {
			return
		}
		if p.Validate(task.PlanRef{Object: "plans/x/e", Shards: shards}) != nil {
			return
		}
		if len(p.Shards) != shards || len(p.Shards) > task.MaxShards {
			t.Fatalf("accepted a plan of %d shards against %d", len(p.Shards), shards)
		}
		for i, s := range p.Shards {
			if s.Priority != nil && (*s.Priority < 0 || *s.Priority > task.MaxPriority) ||
				s.Capability != "" && !task.ValidCapability(s.Capability) || s.EstimatedCost < 0 {
				t.Fatalf("accepted shard %d: %+v", i, s)
			}
		}
	})
}
