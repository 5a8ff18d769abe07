// Package mirrortest gives tests of the audit mirror a real, private MySQL
// database: one new database per test on the server named by
// AX_TEST_MYSQL_DSN, dropped when the test ends.
package mirrortest

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nuid"
)

// DefaultServerDSN is used when AX_TEST_MYSQL_DSN is not set.
const DefaultServerDSN = "root:@tcp(127.0.0.1:3306)/"

// ServerDSN returns the DSN of the test server (no database in it).
func ServerDSN() string {
	if v := os.Getenv("AX_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return DefaultServerDSN
}

// fixHint is appended to every failure to reach the server.
const fixHint = "the mirror tests need a MySQL-compatible server: run scripts/ensure-mysql " +
	"(starts or installs MariaDB on 127.0.0.1:3306, root with an empty password), " +
	"or point AX_TEST_MYSQL_DSN at one, e.g. AX_TEST_MYSQL_DSN='root:secret@tcp(127.0.0.1:3306)/'"

// Server opens an admin connection to the test server or fails the test
// saying how to get one. It is closed when the test ends.
func Server(t testing.TB) (*sql.DB, *mysql.Config) {
	t.Helper()
	cfg, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("AX_TEST_MYSQL_DSN %q: %v; %s", ServerDSN(), err, fixHint)
	}
	cfg.DBName = ""
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.Timeout = 3 * time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("MySQL test server: %v; %s", err, fixHint)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("MySQL test server at %s is not reachable: %v\n%s", cfg.Addr, err, fixHint)
	}
	return db, cfg
}

// DB creates a new empty database ax_test_<random> and returns its DSN and
// an open handle with the settings mirror.Open uses (UTC, parsed times,
// interpolated parameters); the database is dropped when the test ends.
func DB(t testing.TB) (string, *sql.DB) {
	t.Helper()
	admin, cfg := Server(t)
	name := "ax_test_" + strings.ToLower(nuid.Next())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("create test database %s: %v; %s", name, err, fixHint)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	c := cfg.Clone()
	c.DBName = name
	c.InterpolateParams = true
	c.Params = map[string]string{"time_zone": "'+00:00'"}
	conn, err := mysql.NewConnector(c)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return c.FormatDSN(), db
}

// WithAddr returns dsn with its address replaced (e.g. by a proxy's).
func WithAddr(t testing.TB, dsn, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = addr
	return cfg.FormatDSN()
}
