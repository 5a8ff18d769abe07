package task

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestWorkerContract keeps subjects.md's workers registry section in step
// with the announcement's fields.
func TestWorkerContract(t *testing.T) {
	doc, err := os.ReadFile("../subjects.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{Worker{}, WorkerExecution{}, Progress{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(string(doc), `"`+name+`"`) {
				t.Errorf("subjects.md does not document %s.%s (%q)", rt.Name(), rt.Field(i).Name, name)
			}
		}
	}
}
