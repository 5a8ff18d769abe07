package task

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDecodeSpecDefaults(t *testing.T) {
	s, err := DecodeSpec([]byte(`{"id":"a1","type":"t","payload":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.PriorityLevel() != DefaultPriority || s.Capability != DefaultCapability || s.RetryLimit() != DefaultMaxRetries ||
		s.Timeout.Std() != DefaultTimeout || s.EstimatedCost != DefaultEstimatedCost || s.Priority == nil || s.MaxRetries == nil {
		t.Fatalf("defaults not applied: %+v", s)
	}
	s, err = DecodeSpec([]byte(`{"id":"a1","type":"t","priority":0,"max_retries":0,"timeout":"2s","estimated_cost":0.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.PriorityLevel() != 0 || s.RetryLimit() != 0 || s.Timeout.Std() != 2*time.Second || s.EstimatedCost != 0.5 {
		t.Fatalf("explicit zero values lost: %+v", s)
	}
}

// TestZeroValuesMeanDefaultsInGoAndJSON: a Go literal that leaves fields
// unset means the same as JSON without them, whether the literal is
// normalized in Go or sent as JSON; explicit zeros survive both ways.
func TestZeroValuesMeanDefaultsInGoAndJSON(t *testing.T) {
	fromJSON, err := DecodeSpec([]byte(`{"id":"a1","type":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	literal := Spec{ID: "a1", Type: "t"}
	wire, err := json.Marshal(literal)
	if err != nil {
		t.Fatal(err)
	}
	if string(wire) != `{"id":"a1","type":"t"}` {
		t.Errorf("a literal with unset fields travels as %s, want only id and type", wire)
	}
	viaWire, err := DecodeSpec(wire)
	if err != nil {
		t.Fatal(err)
	}
	normalized := literal
	normalized.Normalize()
	fromNew, err := New("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	fromNew.ID = "a1"
	for name, s := range map[string]Spec{"literal sent as JSON": viaWire, "literal normalized": normalized, "New": fromNew} {
		if !reflect.DeepEqual(s, fromJSON) {
			t.Errorf("%s: %+v, want %+v (the JSON defaults)", name, s, fromJSON)
		}
		if s.PriorityLevel() != 2 || s.RetryLimit() != 5 {
			t.Errorf("%s: priority %d, %d retries; want 2 and 5", name, s.PriorityLevel(), s.RetryLimit())
		}
	}
	if literal.PriorityLevel() != DefaultPriority || literal.RetryLimit() != DefaultMaxRetries {
		t.Errorf("accessors of an unnormalized literal: %d, %d", literal.PriorityLevel(), literal.RetryLimit())
	}
	again := normalized
	again.Normalize()
	if !reflect.DeepEqual(again, normalized) {
		t.Errorf("Normalize is not idempotent: %+v then %+v", normalized, again)
	}

	explicit := Spec{ID: "a1", Type: "t", Priority: new(0), MaxRetries: new(0)}
	wire, err = json.Marshal(explicit)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSpec(wire)
	if err != nil {
		t.Fatal(err)
	}
	explicit.Normalize()
	if back.PriorityLevel() != 0 || back.RetryLimit() != 0 || explicit.PriorityLevel() != 0 || explicit.RetryLimit() != 0 {
		t.Errorf("p0 with no retries became %s: p%d, %d retries (normalized p%d, %d)", wire,
			back.PriorityLevel(), back.RetryLimit(), explicit.PriorityLevel(), explicit.RetryLimit())
	}
}

func TestBadSpecs(t *testing.T) {
	big := `"` + strings.Repeat("x", DefaultMaxPayload) + `"`
	tests := []struct {
		name, in, want string
	}{
		{"malformed", `{"id":`, "decode task spec"},
		{"wrong type", `{"id":"a","type":"t","priority":"high"}`, `field "priority"`},
		{"unknown field", `{"id":"a","type":"t","colour":"red"}`, "unknown field"},
		{"priority range", `{"id":"a","type":"t","priority":9}`, "priority: 9 is out of range"},
		{"negative priority", `{"id":"a","type":"t","priority":-1}`, "priority"},
		{"empty type", `{"id":"a","type":""}`, "type: is empty"},
		{"bad id", `{"id":"a.b","type":"t"}`, "id:"},
		{"bad capability", `{"id":"a","type":"t","capability":"a.b"}`, "capability"},
		{"bad timeout", `{"id":"a","type":"t","timeout":"soon"}`, `field "timeout": duration "soon"`},
		{"bad ttl", `{"id":"a","type":"t","ttl":"-"}`, `field "ttl": duration "-"`},
		{"bad dispatch timeout", `{"id":"a","type":"t","capability":"c","dispatch_timeout":"1 minute"}`, `field "dispatch_timeout"`},
		{"zero timeout", `{"id":"a","type":"t","timeout":"0s"}`, "timeout: must be positive"},
		{"numeric timeout", `{"id":"a","type":"t","timeout":30}`, `field "timeout"`},
		{"zero cost", `{"id":"a","type":"t","estimated_cost":0}`, "estimated_cost"},
		{"self dependency", `{"id":"a","type":"t","depends_on":["a"]}`, "itself"},
		{"duplicate dependency", `{"id":"a","type":"t","depends_on":["b","b"]}`, "twice"},
		{"oversized payload", `{"id":"a","type":"t","payload":` + big + `}`, "exceeds the limit"},
		{"trailing data", `{"id":"a","type":"t"} {}`, "trailing"},
		{"too many retries", `{"id":"a","type":"t","max_retries":1000}`, "max_retries"},
		{"unknown trigger rule", `{"id":"a","type":"t","depends_on":["b"],"trigger_rule":"some_failed"}`, `trigger_rule: "some_failed" is not one of`},
		{"unique key without window", `{"id":"a","type":"t","unique_key":"k"}`, "unique_window: is required with unique_key"},
		{"unique window without key", `{"id":"a","type":"t","unique_window":"1h"}`, "unique_window: is only for tasks with a unique_key"},
		{"short unique window", `{"id":"a","type":"t","unique_key":"k","unique_window":"10ms"}`, "unique_window: 10ms is out of range"},
		{"long unique key", `{"id":"a","type":"t","unique_key":"` + strings.Repeat("k", 257) + `","unique_window":"1h"}`, "unique_key: 257 bytes exceed"},
		{"trigger rule without depends_on", `{"id":"a","type":"t","trigger_rule":"all_ended"}`, "trigger_rule: all_ended is only for tasks with depends_on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSpec([]byte(tt.in))
			if err == nil {
				err = s.Validate(0)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestGraphSorted(t *testing.T) {
	mk := func(id string, deps ...string) Spec {
		s, _ := New("t", nil)
		s.ID, s.DependsOn = id, deps
		return s
	}
	g := Graph{Tasks: []Spec{mk("d", "b", "c"), mk("b", "a"), mk("c", "a"), mk("a", "outside")}}
	sorted, err := g.Sorted(0)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, s := range sorted {
		pos[s.ID] = i
	}
	if !(pos["a"] < pos["b"] && pos["a"] < pos["c"] && pos["b"] < pos["d"] && pos["c"] < pos["d"]) {
		t.Fatalf("not topological: %v", pos)
	}
	cyc := Graph{Tasks: []Spec{mk("x", "z"), mk("y", "x"), mk("z", "y")}}
	if _, err := cyc.Sorted(0); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("cycle not detected: %v", err)
	}
	dup := Graph{Tasks: []Spec{mk("x"), mk("x")}}
	if _, err := dup.Sorted(0); err == nil {
		t.Fatal("duplicate id accepted")
	}
}

func TestNewIDSortable(t *testing.T) {
	a := NewID()
	time.Sleep(2 * time.Millisecond)
	b := NewID()
	if !(a < b) || !ValidID(a) {
		t.Fatalf("ids %s, %s not sortable or invalid", a, b)
	}
}

// The validators are hand-written scanners (they are on every submission's
// path); these are the patterns they implement.
var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_\-=/]{0,127}$`)
	tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}$`)
	typePattern  = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}(\.[A-Za-z0-9_\-]{1,64}){0,7}$`)
)

func TestValidatorsMatchTheirPatterns(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []string{"", "a", "A9", "_a", "-a", "a_b-c", "a=b/c", "=", "/a", "a.b", ".a", "a.", "a..b",
		"a.b.c.d.e.f.g.h", "a.b.c.d.e.f.g.h.i", long, long + "a", long + "." + long, strings.Repeat("x", 128),
		strings.Repeat("x", 129), "é", "a b", "a\n", "a*", "a>", "a.*"}
	for _, c := range cases {
		if got, want := ValidID(c), idPattern.MatchString(c); got != want {
			t.Errorf("ValidID(%q) = %v, pattern says %v", c, got, want)
		}
		if got, want := ValidType(c), typePattern.MatchString(c); got != want {
			t.Errorf("ValidType(%q) = %v, pattern says %v", c, got, want)
		}
		if got, want := ValidCapability(c), tokenPattern.MatchString(c); got != want {
			t.Errorf("ValidCapability(%q) = %v, pattern says %v", c, got, want)
		}
	}
}

func FuzzValidators(f *testing.F) {
	for _, s := range []string{"a", "a.b", "a=b/c", "a..b", "-x.y_z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidID(s) != idPattern.MatchString(s) || ValidType(s) != typePattern.MatchString(s) ||
			ValidCapability(s) != tokenPattern.MatchString(s) {
			t.Fatalf("validators disagree with their patterns on %q", s)
		}
	})
}
