package task

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestContractDocumentsKeyLimitFields: every JSON field of a key limit and
// of a concurrency key's slots is named in subjects.md.
func TestContractDocumentsKeyLimitFields(t *testing.T) {
	doc, err := os.ReadFile("../subjects.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{KeyLimit{}, Slots{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(string(doc), "`"+name+"`") && !strings.Contains(string(doc), `"`+name+`"`) {
				t.Errorf("subjects.md does not document %s.%s (%q)", rt.Name(), rt.Field(i).Name, name)
			}
		}
	}
}
