package migrate_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ax-run/ax/internal/migrate"
	"github.com/ax-run/ax/internal/mirror/mirrortest"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// files is a two-version schema with comments and blank lines.
func files() fstest.MapFS {
	return fstest.MapFS{
		"m/0001_initial.sql": file(`-- the first table
CREATE TABLE IF NOT EXISTS t_one (
  id INT NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS t_two (id INT NOT NULL);
`),
		"m/0002_more.sql": file("ALTER TABLE t_one ADD COLUMN note VARCHAR(20) NULL\n"),
		"m/README":        file("not a migration"),
	}
}

func set(fsys fstest.MapFS) *migrate.Set {
	return &migrate.Set{FS: fsys, Dir: "m", VersionTable: "t_schema_version", LockName: "t_migrate", What: "test"}
}

func TestSplitStatements(t *testing.T) {
	got := migrate.SplitStatements("-- c\nA 1;\n\n  -- c2\nB\n  2;\nC 3")
	want := []string{"A 1", "B\n  2", "C 3"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SplitStatements = %q, want %q", got, want)
	}
	if got := migrate.SplitStatements("-- only a comment\n\n"); got != nil {
		t.Fatalf("SplitStatements of comments = %q", got)
	}
}

func TestMigrations(t *testing.T) {
	s := set(files())
	ms, err := s.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].Name != "initial" || len(ms[0].Statements) != 2 ||
		ms[1].Version != 2 || ms[1].Name != "more" || len(ms[1].Statements) != 1 {
		t.Fatalf("Migrations = %+v", ms)
	}
	for _, st := range ms[0].Statements {
		if !strings.HasPrefix(st, "CREATE TABLE IF NOT EXISTS") || strings.HasSuffix(st, ";") {
			t.Fatalf("statement %q", st)
		}
	}
	if s.Version() != 2 {
		t.Fatalf("Version = %d", s.Version())
	}
	schema := s.Schema()
	if strings.Count(schema, ";\n") != 3 || !strings.HasPrefix(schema, "CREATE TABLE IF NOT EXISTS t_one") ||
		!strings.HasSuffix(schema, "ADD COLUMN note VARCHAR(20) NULL;\n") {
		t.Fatalf("Schema = %q", schema)
	}
}

func TestMigrationsMalformed(t *testing.T) {
	for name, tc := range map[string]struct {
		fs   fstest.MapFS
		want string
	}{
		"no number":       {fstest.MapFS{"m/initial.sql": file("X")}, "test migration file initial.sql: want NNNN_name.sql"},
		"version zero":    {fstest.MapFS{"m/0000_x.sql": file("X")}, "want NNNN_name.sql"},
		"version missing": {fstest.MapFS{"m/0001_a.sql": file("X"), "m/0003_c.sql": file("Y")}, "test migrations: version 2 missing"},
	} {
		t.Run(name, func(t *testing.T) {
			s := set(tc.fs)
			if _, err := s.Migrations(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Migrations: %v, want %q", err, tc.want)
			}
			if s.Version() != 0 || s.Schema() != "" {
				t.Fatalf("Version %d, Schema %q of malformed files", s.Version(), s.Schema())
			}
			if _, err := s.Migrate(context.Background(), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Migrate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestBadNames(t *testing.T) {
	s := set(files())
	s.VersionTable = "t; DROP TABLE x"
	if _, err := s.Migrate(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "bad version table or lock name") {
		t.Fatalf("Migrate with a bad table name: %v", err)
	}
	s = set(files())
	s.LockName = "it's"
	if _, err := s.Existing(context.Background(), nil); err == nil {
		t.Fatal("Existing with a bad lock name: no error")
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestMigrate: a fresh database is migrated step by step, concurrent callers
// agree, the version table records each step and the lock is released.
func TestMigrate(t *testing.T) {
	t.Parallel()
	_, db := mirrortest.DB(t)
	c := ctx(t)
	one := set(fstest.MapFS{"m/0001_initial.sql": files()["m/0001_initial.sql"]})
	if v, err := one.Existing(c, db); err != nil || v != 0 {
		t.Fatalf("Existing of an empty database: %d %v", v, err)
	}
	if v, err := one.Migrate(c, db); err != nil || v != 1 {
		t.Fatalf("Migrate to 1: %d %v", v, err)
	}
	two := set(files())
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := two.Migrate(c, db)
			if err == nil && v != 2 {
				err = errors.New("wrong version")
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate to 2: %v", err)
		}
	}
	if v, err := two.Existing(c, db); err != nil || v != 2 {
		t.Fatalf("Existing after Migrate: %d %v", v, err)
	}
	var n, maxV int
	if err := db.QueryRowContext(c, "SELECT COUNT(*), MAX(version) FROM t_schema_version").Scan(&n, &maxV); err != nil || n != 2 || maxV != 2 {
		t.Fatalf("version table: %d rows, max %d (%v)", n, maxV, err)
	}
	var name string
	if err := db.QueryRowContext(c, "SELECT name FROM t_schema_version WHERE version = 2").Scan(&name); err != nil || name != "more" {
		t.Fatalf("version 2 recorded as %q (%v)", name, err)
	}
	if _, err := db.ExecContext(c, "INSERT INTO t_one (id, note) VALUES (1, 'x')"); err != nil {
		t.Fatalf("migrated table: %v", err)
	}
	var comment string
	if err := db.QueryRowContext(c, "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't_schema_version'").Scan(&comment); err != nil || comment != "AX: applied test schema migrations" {
		t.Fatalf("version table comment %q (%v)", comment, err)
	}
	var free int
	if err := db.QueryRowContext(c, "SELECT IS_FREE_LOCK(CONCAT('t_migrate.', DATABASE()))").Scan(&free); err != nil || free != 1 {
		t.Fatalf("migration lock free = %d (%v)", free, err)
	}
	// Another set's version table in the same database is independent.
	other := set(fstest.MapFS{"m/0001_x.sql": file("CREATE TABLE IF NOT EXISTS t_other (id INT)")})
	other.VersionTable, other.LockName = "t_other_version", "t_other_migrate"
	if v, err := other.Migrate(c, db); err != nil || v != 1 {
		t.Fatalf("Migrate of another set: %d %v", v, err)
	}
	if v, err := two.Existing(c, db); err != nil || v != 2 {
		t.Fatalf("Existing after another set: %d %v", v, err)
	}
}

// TestMigrateTooNew: a database newer than the set is refused, with
// *SchemaTooNewError or TooNew's error, and left alone.
func TestMigrateTooNew(t *testing.T) {
	t.Parallel()
	_, db := mirrortest.DB(t)
	c := ctx(t)
	s := set(files())
	if _, err := s.Migrate(c, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(c, "INSERT INTO t_schema_version VALUES (3, 'future', NOW())"); err != nil {
		t.Fatal(err)
	}
	v, err := s.Migrate(c, db)
	var tooNew *migrate.SchemaTooNewError
	if !errors.As(err, &tooNew) || v != 3 || tooNew.Database != 3 || tooNew.Supported != 2 {
		t.Fatalf("Migrate of a newer schema: %d %v", v, err)
	}
	mine := errors.New("mine")
	s.TooNew = func(database, supported int) error {
		if database != 3 || supported != 2 {
			t.Errorf("TooNew(%d, %d)", database, supported)
		}
		return mine
	}
	if _, err := s.Migrate(c, db); !errors.Is(err, mine) {
		t.Fatalf("Migrate with TooNew: %v", err)
	}
}

// TestMigrateFails: a failing statement stops at the last good version and
// says which migration failed.
func TestMigrateFails(t *testing.T) {
	t.Parallel()
	_, db := mirrortest.DB(t)
	c := ctx(t)
	fsys := files()
	fsys["m/0003_broken.sql"] = file("ALTER TABLE no_such_table ADD COLUMN x INT")
	v, err := set(fsys).Migrate(c, db)
	if err == nil || v != 2 || !strings.Contains(err.Error(), "migrate test to version 3 (broken)") {
		t.Fatalf("Migrate with a broken migration: %d %v", v, err)
	}
}
