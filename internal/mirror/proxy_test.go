package mirror

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ax-run/ax/internal/tcpproxy"
)

// newProxy starts a TCP proxy between the mirror and MySQL that a test can
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

func dsnAddr(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}
