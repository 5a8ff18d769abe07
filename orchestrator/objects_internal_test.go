package orchestrator

import (
	"strings"
	"testing"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/task"
)

// What the orchestrator accepts of the objects a report names.
func TestObjectRefProblem(t *testing.T) {
	t.Parallel()
	own, name := subject.ObjectBucket("email"), task.ResultObjectName("a", "e1")
	digest := object.Digest([]byte("x"))
	for _, c := range []struct {
		what, name, bucket, digest string
		want                       string // "" accepted, else a part of the reason
	}{
		{"own store with digest", name, own, digest, ""},
		{"legacy store, no digest", name, "", "", ""},
		{"legacy store with digest", name, "", digest, ""},
		{"legacy store, bad digest", name, "", "sha256:x", "invalid digest"},
		{"another task", task.ResultObjectName("b", "e1"), own, digest, "is not this attempt's"},
		{"another attempt", task.ResultObjectName("a", "e0"), own, digest, "is not this attempt's"},
		{"a plan's name", task.PlanObject("a", "e1"), own, digest, "is not this attempt's"},
		{"another capability's store", name, subject.ObjectBucket("pdf"), digest, "not in " + own},
		{"the legacy store named", name, subject.BucketObjects, digest, "not in " + own},
		{"no digest", name, own, "", "no valid digest"},
		{"digest of another form", name, own, "SHA-256=abc", "no valid digest"},
	} {
		got := objectRefProblem("result object", c.name, name, c.bucket, c.digest, "email")
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}
