package natsconn

import (
	"path/filepath"
	"testing"
)

// A context saved by SaveContext (what ax dev leaves) is read back by
// name from the configuration directory, and by path.
func TestSaveContextIsReadBack(t *testing.T) {
	dir := t.TempDir()
	path, err := ContextPath(dir, "ax-dev")
	if err != nil || path != filepath.Join(dir, "context", "ax-dev.json") {
		t.Fatalf("ContextPath = %q, %v", path, err)
	}
	if err := SaveContext(path, "the demo", "nats://127.0.0.1:4999"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []Settings{{Context: "ax-dev", ContextDir: dir}, {Context: path}} {
		r, err := s.Resolve()
		if err != nil || r.URL != "nats://127.0.0.1:4999" {
			t.Errorf("Resolve(%+v) = %q, %v", s, r.URL, err)
		}
	}
	if _, err := ContextPath(dir, "../evil"); err == nil {
		t.Error("ContextPath accepted a name with ..")
	}
	if _, err := ContextPath("", "ax-dev"); err == nil {
		t.Error("ContextPath without a directory")
	}
}
