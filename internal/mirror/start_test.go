package mirror

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nuid"

	"github.com/ax-run/ax/internal/mirror/mirrortest"
	"github.com/ax-run/ax/internal/testenv"
)

// TestStartErrors checks that what an operator must fix is reported at
// start with a message that says what is wrong, and that an unreachable
// MySQL is not fatal.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	dsn, db := mirrortest.DB(t)
	admin, _ := mirrortest.Server(t)
	ctx := testenv.Context(t, 30*time.Second)
	base, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	with := func(mod func(c *mysql.Config)) string {
		c := base.Clone()
		mod(c)
		return c.FormatDSN()
	}
	start := func(dsn string) (*Mirror, error) {
		m, err := NewFromDSN(testenv.Conn(t, srv.URL()), dsn, Config{ConnectTimeout: 5 * time.Second, RetryMin: 20 * time.Millisecond, LagInterval: 50 * time.Millisecond})
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = m.Stop(context.Background()) })
		return m, m.Start(ctx)
	}
	wantErr := func(t *testing.T, err error, parts ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("no error")
		}
		t.Logf("error: %v", err)
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q does not mention %q", err, p)
			}
		}
	}

	t.Run("malformed DSN", func(t *testing.T) {
		_, err := start("root@tcp(127.0.0.1:3306")
		wantErr(t, err, "parse MySQL DSN", "user:password@tcp(host:3306)/database")
	})
	t.Run("DSN without database", func(t *testing.T) {
		_, err := start(with(func(c *mysql.Config) { c.DBName = "" }))
		wantErr(t, err, "names no database")
	})
	t.Run("wrong password", func(t *testing.T) {
		_, err := start(with(func(c *mysql.Config) { c.Passwd = "definitely-wrong" }))
		wantErr(t, err, "rejected user", "wrong user name or password")
	})
	t.Run("unknown database", func(t *testing.T) {
		_, err := start(with(func(c *mysql.Config) { c.DBName = "ax_test_missing_" + strings.ToLower(nuid.Next()) }))
		wantErr(t, err, "does not exist")
	})
	t.Run("missing privileges", func(t *testing.T) {
		if _, err := Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		for _, grant := range []string{"SELECT", "SELECT, INSERT", "SELECT, INSERT, UPDATE, DELETE"} {
			user := "ax_ro_" + strings.ToLower(nuid.Next())[10:]
			if _, err := admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
			if _, err := admin.ExecContext(ctx, "GRANT "+grant+" ON `"+base.DBName+"`.* TO '"+user+"'@'%'"); err != nil {
				t.Fatal(err)
			}
			_, err := start(with(func(c *mysql.Config) { c.User, c.Passwd = user, "pw" }))
			if grant == "SELECT, INSERT, UPDATE, DELETE" {
				if err != nil {
					t.Fatalf("a migrated database needs only DML privileges, got %v", err)
				}
				continue
			}
			wantErr(t, err, "lacks a privilege", "GRANT SELECT, INSERT, UPDATE, DELETE")
		}
	})
	t.Run("unreachable MySQL is retried, not fatal", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		m, err := start(with(func(c *mysql.Config) { c.Addr = addr }))
		if err != nil {
			t.Fatalf("start with MySQL down: %v", err)
		}
		l, err := m.Lag(ctx)
		if err != nil || l.DBDownSince.IsZero() || !strings.Contains(l.LastError, "connection refused") {
			t.Fatalf("lag %+v, %v", l, err)
		}
	})
}

// TestSchemaVersions checks concurrent migration and that a database
// migrated by a newer binary is refused.
func TestSchemaVersions(t *testing.T) {
	t.Parallel()
	srv := testenv.NATS(t)
	_, db := mirrortest.DB(t)
	ctx := testenv.Context(t, 30*time.Second)

	if err := CheckSchema(ctx, db); !errors.As(err, new(*SchemaTooOldError)) {
		t.Fatalf("check of an empty database: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Migrate(ctx, db)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	var n, v int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*), MAX(version) FROM ax_schema_version").Scan(&n, &v); err != nil || n != SchemaVersion() || v != SchemaVersion() {
		t.Fatalf("versions: %d rows, max %d, %v", n, v, err)
	}
	if err := CheckSchema(ctx, db); err != nil {
		t.Fatal(err)
	}

	newer := SchemaVersion() + 1
	if _, err := db.ExecContext(ctx, "INSERT INTO ax_schema_version (version, name, applied_at) VALUES (?, 'from_the_future', NOW(6))", newer); err != nil {
		t.Fatal(err)
	}
	m, err := New(testenv.Conn(t, srv.URL()), db, Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(ctx)
	var tooNew *SchemaTooNewError
	if !errors.As(err, &tooNew) || tooNew.Database != newer || !strings.Contains(err.Error(), "upgrade ax") {
		t.Fatalf("start on a newer schema: %v", err)
	}
	if err := CheckSchema(ctx, db); !errors.As(err, &tooNew) {
		t.Fatalf("check of a newer schema: %v", err)
	}
	if _, err := Rebuild(ctx, testenv.Conn(t, srv.URL()), db, RebuildOptions{}); !errors.As(err, &tooNew) {
		t.Fatalf("rebuild into a newer schema: %v", err)
	}
}
