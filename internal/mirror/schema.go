package mirror

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one versioned schema change.
type migration struct {
	version    int
	name       string
	statements []string
}

// SchemaTooNewError is returned when the database was migrated by a newer
// ax binary than this one: this binary does not know the schema and refuses
// to write to it.
type SchemaTooNewError struct {
	// Database is the schema version found in ax_schema_version.
	Database int
	// Supported is the newest version this binary knows.
	Supported int
}

// Error says which versions disagree and what to do.
func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the audit database has schema version %d, newer than the %d this ax binary supports: upgrade ax (or point it at another database)",
		e.Database, e.Supported)
}

// SchemaTooOldError is returned by CheckSchema when the database has not
// been migrated to this binary's version yet (run the mirror once).
type SchemaTooOldError struct {
	Database, Supported int
}

// Error says which versions disagree and what to do.
func (e *SchemaTooOldError) Error() string {
	if e.Database == 0 {
		return "the audit database has no AX tables yet: run `ax mirror` (or `ax audit rebuild`) against it first"
	}
	return fmt.Sprintf("the audit database has schema version %d, older than the %d this ax binary expects: run the mirror once to migrate it",
		e.Database, e.Supported)
}

// loadMigrations parses the embedded NNNN_name.sql files in version order.
func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", base)
		}
		data, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: name, statements: splitStatements(string(data))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := range out {
		if out[i].version != i+1 {
			return nil, fmt.Errorf("migrations: version %d missing", i+1)
		}
	}
	return out, nil
}

// splitStatements splits a migration at semicolons that end a line and
// drops "--" comment lines.
func splitStatements(src string) []string {
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
			s := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, s)
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// SchemaVersion is the schema version this binary writes and reads.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS ax_schema_version (
  version    INT          NOT NULL,
  name       VARCHAR(255) NOT NULL,
  applied_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='AX: applied schema migrations'`

// Migrate brings the database's schema to this binary's version and returns
// it. Concurrent callers (several mirrors starting at once) are serialised
// with a named lock. A database with a newer version than this binary knows
// is refused with *SchemaTooNewError and left untouched.
func Migrate(ctx context.Context, db *sql.DB) (int, error) {
	ms, err := loadMigrations()
	if err != nil {
		return 0, err
	}
	latest := ms[len(ms)-1].version
	// Up to date (the common case): no lock and no DDL, so a user with only
	// SELECT, INSERT, UPDATE and DELETE can run a migrated database.
	if cur, err := existingVersion(ctx, db); err != nil {
		return 0, err
	} else if cur > latest {
		return cur, &SchemaTooNewError{Database: cur, Supported: latest}
	} else if cur == latest {
		return cur, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	// The lock is per server, so its name includes the database.
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('ax_mirror_migrate.', DATABASE()), 60)").Scan(&got); err != nil {
		return 0, fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, errors.New("migrate: another process holds the migration lock for over a minute")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(CONCAT('ax_mirror_migrate.', DATABASE()))")
	}()
	if _, err := conn.ExecContext(ctx, createVersionTable); err != nil {
		return 0, fmt.Errorf("migrate: create ax_schema_version: %w", err)
	}
	cur, err := currentVersion(ctx, conn)
	if err != nil {
		return 0, err
	}
	if cur > latest {
		return cur, &SchemaTooNewError{Database: cur, Supported: latest}
	}
	for _, m := range ms[cur:] {
		for _, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return cur, fmt.Errorf("migrate to version %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO ax_schema_version (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, time.Now().UTC()); err != nil {
			return cur, fmt.Errorf("migrate: record version %d: %w", m.version, err)
		}
		cur = m.version
	}
	return cur, nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func currentVersion(ctx context.Context, q queryer) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT MAX(version) FROM ax_schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// existingVersion returns the schema version, 0 when the database has no
// ax_schema_version table yet.
func existingVersion(ctx context.Context, db *sql.DB) (int, error) {
	var exists int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ax_schema_version'").Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if exists == 0 {
		return 0, nil
	}
	return currentVersion(ctx, db)
}

// CheckSchema verifies, without changing anything, that the database has
// exactly the schema version this binary knows (for readers such as
// `ax audit`). It returns *SchemaTooNewError or *SchemaTooOldError otherwise.
func CheckSchema(ctx context.Context, db *sql.DB) error {
	latest := SchemaVersion()
	cur, err := existingVersion(ctx, db)
	if err != nil {
		return fmt.Errorf("check schema: %w", explain(err, nil))
	}
	switch {
	case cur > latest:
		return &SchemaTooNewError{Database: cur, Supported: latest}
	case cur < latest:
		return &SchemaTooOldError{Database: cur, Supported: latest}
	}
	return nil
}
