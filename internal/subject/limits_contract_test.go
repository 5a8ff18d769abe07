package subject

import (
	"os"
	"strings"
	"testing"
)

// TestContractDocumentsKeyLimitNames keeps subjects.md in step with the
// names of key limits: the slots bucket, the control keys, the commands
// and the markers of tasks waiting for a slot.
func TestContractDocumentsKeyLimitNames(t *testing.T) {
	doc, err := os.ReadFile("../../subjects.md")
	if err != nil {
		t.Fatalf("read subjects.md: %v", err)
	}
	names := []string{
		BucketSlots, "limit.<id>", CommandLimitSet, CommandLimitDelete, SlotWaitAll,
		"ax.slotwait.p<N>.<key>.<id>", `"kind": "breaker"|"pause"|"limit"`,
		// The example of an id the document gives.
		LimitID("customer.*"),
	}
	for _, n := range names {
		if !strings.Contains(string(doc), n) {
			t.Errorf("subjects.md does not mention %q", n)
		}
	}
	if got := ControlLimit(""); got+LimitID("customer.*") != ControlLimit("customer.*") {
		t.Errorf("ControlLimit(%q) = %q is not the prefix of every limit key", "", got)
	}
}
