package outbox_test

import (
	"testing"

	"github.com/ax-run/ax/internal/tcpproxy"
)

// newProxy starts a TCP proxy between the relay and MySQL that a test can
// cut (every connection closed, new ones refused: MySQL "goes away") and
// restore; it is closed when the test ends.
func newProxy(t testing.TB, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
