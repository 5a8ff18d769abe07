// Package migrate applies versioned MySQL schema migrations: NNNN_name.sql
// files (usually embedded) applied in order under a named lock, each
// recorded in a version table. The audit mirror and the outbox use it, each
// with its own version table and lock, so both may share a database.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Set is one package's migrations and bookkeeping.
type Set struct {
	// FS holds the migration files, Dir/NNNN_name.sql, versions 1, 2, ...
	FS fs.FS
	// Dir is the folder of FS the files are in.
	Dir string
	// VersionTable records the applied versions (e.g. ax_schema_version).
	VersionTable string
	// LockName is the prefix of the named lock (GET_LOCK) that serialises
	// migrations; the database's name is appended after a dot.
	LockName string
	// What names the schema in errors ("outbox": "migrate outbox: ...");
	// empty for plain "migrate: ...".
	What string
	// TooNew, when set, makes the error for a database newer than the
	// migrations; without it that error is *SchemaTooNewError.
	TooNew func(database, supported int) error
}

// Migration is one versioned schema change.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// SchemaTooNewError is returned when the database was migrated by a newer
// binary than the running one (and Set.TooNew is nil).
type SchemaTooNewError struct {
	// Database is the version found in the version table.
	Database int
	// Supported is the newest version the Set knows.
	Supported int
}

// Error says which versions disagree.
func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the database has schema version %d, newer than the %d this binary supports: upgrade it", e.Database, e.Supported)
}

// named returns "verb what", or verb without What.
func (s *Set) named(verb string) string {
	if s.What == "" {
		return verb
	}
	return verb + " " + s.What
}

// of returns "what noun", or noun without What.
func (s *Set) of(noun string) string {
	if s.What == "" {
		return noun
	}
	return s.What + " " + noun
}

func (s *Set) tooNew(database, supported int) error {
	if s.TooNew != nil {
		return s.TooNew(database, supported)
	}
	return &SchemaTooNewError{Database: database, Supported: supported}
}

// check refuses names that cannot go into SQL as they are.
func (s *Set) check() error {
	for _, n := range []string{s.VersionTable, s.LockName} {
		if n == "" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			return fmt.Errorf("%s: bad version table or lock name %q", s.named("migrate"), n)
		}
	}
	return nil
}

// Migrations parses the migration files in version order.
func (s *Set) Migrations() ([]Migration, error) {
	names, err := fs.Glob(s.FS, path.Join(s.Dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.of("migrations"), err)
	}
	var out []Migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("%s %s: want NNNN_name.sql", s.of("migration file"), base)
		}
		data, err := fs.ReadFile(s.FS, n)
		if err != nil {
			return nil, fmt.Errorf("read %s %s: %w", s.of("migration"), base, err)
		}
		out = append(out, Migration{Version: v, Name: name, Statements: SplitStatements(string(data))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("%s: version %d missing", s.of("migrations"), i+1)
		}
	}
	return out, nil
}

// SplitStatements splits a migration at semicolons that end a line and
// drops "--" comment lines.
func SplitStatements(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Version is the newest schema version of the Set, 0 if its files are
// missing or malformed.
func (s *Set) Version() int {
	ms, err := s.Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Schema returns the DDL of every migration, in order, each statement
// followed by ";\n"; empty if the files are malformed.
func (s *Set) Schema() string {
	ms, err := s.Migrations()
	if err != nil {
		return ""
	}
	var sb strings.Builder
	for _, m := range ms {
		for _, st := range m.Statements {
			sb.WriteString(st)
			sb.WriteString(";\n")
		}
	}
	return sb.String()
}

func (s *Set) createVersionTable() string {
	return `CREATE TABLE IF NOT EXISTS ` + s.VersionTable + ` (
  version    INT          NOT NULL,
  name       VARCHAR(255) NOT NULL,
  applied_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='AX: applied ` + s.of("schema migrations") + `'`
}

// Migrate brings db's database to the Set's newest version and returns the
// version. Concurrent callers are serialised with a named lock. A database
// with a newer version than the Set knows is refused (see TooNew) and left
// untouched.
func (s *Set) Migrate(ctx context.Context, db *sql.DB) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	ms, err := s.Migrations()
	if err != nil {
		return 0, err
	}
	if len(ms) == 0 {
		return 0, fmt.Errorf("%s: no migrations", s.named("migrate"))
	}
	latest := ms[len(ms)-1].Version
	// Up to date (the common case): no lock and no DDL, so a user with only
	// SELECT, INSERT, UPDATE and DELETE can run a migrated database.
	if cur, err := s.Existing(ctx, db); err != nil {
		return 0, err
	} else if cur > latest {
		return cur, s.tooNew(cur, latest)
	} else if cur == latest {
		return cur, nil
	}
	migrate := s.named("migrate")
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", migrate, err)
	}
	defer conn.Close()
	// The lock is per server, so its name includes the database.
	lock := "CONCAT('" + s.LockName + ".', DATABASE())"
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lock+", 60)").Scan(&got); err != nil {
		return 0, fmt.Errorf("%s: take the migration lock: %w", migrate, err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, errors.New(migrate + ": another process holds the migration lock for over a minute")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK("+lock+")")
	}()
	if _, err := conn.ExecContext(ctx, s.createVersionTable()); err != nil {
		return 0, fmt.Errorf("%s: create %s: %w", migrate, s.VersionTable, err)
	}
	cur, err := s.current(ctx, conn)
	if err != nil {
		return 0, err
	}
	if cur > latest {
		return cur, s.tooNew(cur, latest)
	}
	for _, m := range ms[cur:] {
		for _, stmt := range m.Statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return cur, fmt.Errorf("%s to version %d (%s): %w", migrate, m.Version, m.Name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+s.VersionTable+" (version, name, applied_at) VALUES (?, ?, ?)",
			m.Version, m.Name, time.Now().UTC()); err != nil {
			return cur, fmt.Errorf("%s: record version %d: %w", migrate, m.Version, err)
		}
		cur = m.Version
	}
	return cur, nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// current reads the newest version from the version table.
func (s *Set) current(ctx context.Context, q queryer) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT MAX(version) FROM "+s.VersionTable).Scan(&v); err != nil {
		return 0, fmt.Errorf("read %s: %w", s.of("schema version"), err)
	}
	return int(v.Int64), nil
}

// Existing returns the database's schema version without changing
// anything, 0 when it has no version table yet.
func (s *Set) Existing(ctx context.Context, db *sql.DB) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var exists int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '"+s.VersionTable+"'").Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", s.of("schema version"), err)
	}
	if exists == 0 {
		return 0, nil
	}
	return s.current(ctx, db)
}
