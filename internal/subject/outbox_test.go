package subject

import (
	"os"
	"strings"
	"testing"
)

// TestContractDocumentsOutbox keeps subjects.md in step with the outbox's names.
func TestContractDocumentsOutbox(t *testing.T) {
	doc, err := os.ReadFile("../../subjects.md")
	if err != nil {
		t.Fatalf("read subjects.md: %v", err)
	}
	if !strings.Contains(string(doc), OutboxNotify) {
		t.Errorf("subjects.md does not mention %q", OutboxNotify)
	}
}

func TestSubmitMsgIDIsDeterministic(t *testing.T) {
	a, b := SubmitMsgID("x", []byte(`{"id":"x"}`)), SubmitMsgID("x", []byte(`{"id":"x"}`))
	if a != b || !strings.HasPrefix(a, "x:") {
		t.Fatalf("SubmitMsgID = %q, %q", a, b)
	}
	if SubmitMsgID("x", []byte(`{"id":"x","priority":1}`)) == a {
		t.Fatal("a different body gave the same message id")
	}
}
