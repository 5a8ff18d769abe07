package executor

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAllUnavailable: an executor starts without the ready consumers NATS
// could not create for now, but not without one refused for another
// reason (a permission, a missing stream): every joined error must be an
// unavailability.
func TestAllUnavailable(t *testing.T) {
	outage := errors.Join(
		fmt.Errorf("executor: ready consumer default p3: %w", context.DeadlineExceeded),
		fmt.Errorf("executor: ready consumer default p4: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008}),
		fmt.Errorf("executor: ready consumer default p5: %w", nats.ErrNoResponders))
	if !allUnavailable(outage) {
		t.Errorf("allUnavailable(%v) = false", outage)
	}
	for _, err := range []error{
		errors.Join(fmt.Errorf("p3: %w", context.DeadlineExceeded), fmt.Errorf("p4: %w", nats.ErrPermissionViolation)),
		fmt.Errorf("p0: %w", jetstream.ErrStreamNotFound),
		errors.New("refused"),
	} {
		if allUnavailable(err) {
			t.Errorf("allUnavailable(%v) = true", err)
		}
	}
}
