package outbox

import (
	"context"
	"database/sql"
	"embed"
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
// version of this package than the running one.
type SchemaTooNewError struct {
	// Database is the version found in ax_outbox_schema_version.
	Database int
	// Supported is the newest version this binary knows.
	Supported int
}

// Error says which versions disagree and what to do.
func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the outbox table has schema version %d, newer than the %d this binary supports: upgrade it", e.Database, e.Supported)
}

func loadMigrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list outbox migrations: %w", err)
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("outbox migration file %s: want NNNN_name.sql", base)
		}
		data, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("read outbox migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: name, statements: splitStatements(string(data))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := range out {
		if out[i].version != i+1 {
			return nil, fmt.Errorf("outbox migrations: version %d missing", i+1)
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
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Schema returns the DDL of every migration, in order, for applications
// that manage their schema with their own migration tool instead of calling
// Migrate. Statements are separated by ";\n".
func Schema() string {
	ms, err := loadMigrations()
	if err != nil {
		return ""
	}
	var sb strings.Builder
	for _, m := range ms {
		for _, s := range m.statements {
			sb.WriteString(s)
			sb.WriteString(";\n")
		}
	}
	return sb.String()
}

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS ax_outbox_schema_version (
  version    INT          NOT NULL,
  name       VARCHAR(255) NOT NULL,
  applied_at DATETIME(6)  NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='AX: applied outbox schema migrations'`

// Migrate creates or upgrades the ax_outbox table in db's database and
// returns the schema version. It is idempotent and safe to call from several
// processes at once (they are serialised with a named lock); a database with
// a newer version is refused with *SchemaTooNewError and left untouched.
// Its bookkeeping table is ax_outbox_schema_version, apart from the audit
// mirror's, so both may share a database.
func Migrate(ctx context.Context, db *sql.DB) (int, error) {
	ms, err := loadMigrations()
	if err != nil {
		return 0, err
	}
	latest := ms[len(ms)-1].version
	if cur, err := existingVersion(ctx, db); err != nil {
		return 0, err
	} else if cur > latest {
		return cur, &SchemaTooNewError{Database: cur, Supported: latest}
	} else if cur == latest {
		return cur, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate outbox: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('ax_outbox_migrate.', DATABASE()), 60)").Scan(&got); err != nil {
		return 0, fmt.Errorf("migrate outbox: take the migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return 0, fmt.Errorf("migrate outbox: another process holds the migration lock for over a minute")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(CONCAT('ax_outbox_migrate.', DATABASE()))")
	}()
	if _, err := conn.ExecContext(ctx, createVersionTable); err != nil {
		return 0, fmt.Errorf("migrate outbox: create ax_outbox_schema_version: %w", err)
	}
	var v sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT MAX(version) FROM ax_outbox_schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read outbox schema version: %w", err)
	}
	cur := int(v.Int64)
	if cur > latest {
		return cur, &SchemaTooNewError{Database: cur, Supported: latest}
	}
	for _, m := range ms[cur:] {
		for _, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return cur, fmt.Errorf("migrate outbox to version %d (%s): %w", m.version, m.name, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO ax_outbox_schema_version (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, time.Now().UTC()); err != nil {
			return cur, fmt.Errorf("migrate outbox: record version %d: %w", m.version, err)
		}
		cur = m.version
	}
	return cur, nil
}

// existingVersion returns the schema version, 0 without a version table.
func existingVersion(ctx context.Context, db *sql.DB) (int, error) {
	var exists int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'ax_outbox_schema_version'").Scan(&exists)
	if err != nil {
		return 0, fmt.Errorf("read outbox schema version: %w", err)
	}
	if exists == 0 {
		return 0, nil
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM ax_outbox_schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read outbox schema version: %w", err)
	}
	return int(v.Int64), nil
}
