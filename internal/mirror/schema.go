package mirror

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/ax-run/ax/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// schema is the audit tables' migrations, recorded in ax_schema_version.
var schema = &migrate.Set{
	FS:           migrationFiles,
	Dir:          "migrations",
	VersionTable: "ax_schema_version",
	LockName:     "ax_mirror_migrate",
	TooNew: func(database, supported int) error {
		return &SchemaTooNewError{Database: database, Supported: supported}
	},
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

// SchemaVersion is the schema version this binary writes and reads.
func SchemaVersion() int { return schema.Version() }

// Migrate brings the database's schema to this binary's version and returns
// it. Concurrent callers (several mirrors starting at once) are serialised
// with a named lock. A database with a newer version than this binary knows
// is refused with *SchemaTooNewError and left untouched.
func Migrate(ctx context.Context, db *sql.DB) (int, error) { return schema.Migrate(ctx, db) }

// CheckSchema verifies, without changing anything, that the database has
// exactly the schema version this binary knows (for readers such as
// `ax audit`). It returns *SchemaTooNewError or *SchemaTooOldError otherwise.
func CheckSchema(ctx context.Context, db *sql.DB) error {
	latest := SchemaVersion()
	cur, err := schema.Existing(ctx, db)
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
