package task

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestContractDocumentsEveryField: every JSON field of every wire type is
// named in subjects.md.
func TestContractDocumentsEveryField(t *testing.T) {
	doc, err := os.ReadFile("../subjects.md")
	if err != nil {
		t.Fatal(err)
	}
	types := []any{Spec{}, Task{}, Event{}, Dispatch{}, Report{}, AttemptError{}, DeadLetter{}, Rejection{},
		Graph{}, Schedule{}, Pause{}, AuditEvent{}, CommandRequest{}, CommandReply{}, StateReply{},
		ShardSpec{}, Plan{}, PlanRef{}, Sharding{}, ShardSummary{}, MemberOutcome{}, Lease{}, Step{}, StepReply{}}
	for _, v := range types {
		var walk func(rt reflect.Type)
		walk = func(rt reflect.Type) {
			for i := range rt.NumField() {
				f := rt.Field(i)
				if f.Anonymous {
					walk(f.Type)
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "" || name == "-" {
					continue
				}
				if !strings.Contains(string(doc), "`"+name+"`") && !strings.Contains(string(doc), `"`+name+`"`) {
					t.Errorf("subjects.md does not document %s.%s (%q)", rt.Name(), f.Name, name)
				}
			}
		}
		walk(reflect.TypeOf(v))
	}
}
