package executor_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ax-run/ax/internal/retry"
)

var fastRetry = retry.Policy{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start"))
}
