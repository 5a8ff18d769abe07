package subject

import (
	"os"
	"strings"
	"testing"
)

func TestContractDocumentsTraceHeader(t *testing.T) {
	doc, err := os.ReadFile("../../subjects.md")
	if err != nil {
		t.Fatalf("read subjects.md: %v", err)
	}
	if !strings.Contains(string(doc), "`"+HeaderTraceParent+"`") {
		t.Errorf("subjects.md does not document the %q header", HeaderTraceParent)
	}
}
