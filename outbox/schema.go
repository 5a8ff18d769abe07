package outbox

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/ax-run/ax/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// schema is the outbox's migrations; its version table and lock are apart
// from the audit mirror's, so both may share a database.
var schema = &migrate.Set{
	FS:           migrationFiles,
	Dir:          "migrations",
	VersionTable: "ax_outbox_schema_version",
	LockName:     "ax_outbox_migrate",
	What:         "outbox",
	TooNew: func(database, supported int) error {
		return &SchemaTooNewError{Database: database, Supported: supported}
	},
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

// Schema returns the DDL of every migration, in order, for applications
// that manage their schema with their own migration tool instead of calling
// Migrate. Statements are separated by ";\n".
func Schema() string { return schema.Schema() }

// SchemaVersion is the newest schema version this package knows.
func SchemaVersion() int { return schema.Version() }

// Migrate creates or upgrades the ax_outbox table in db's database and
// returns the schema version. It is idempotent and safe to call from several
// processes at once (they are serialised with a named lock); a database with
// a newer version is refused with *SchemaTooNewError and left untouched.
// Its bookkeeping table is ax_outbox_schema_version, apart from the audit
// mirror's, so both may share a database.
func Migrate(ctx context.Context, db *sql.DB) (int, error) { return schema.Migrate(ctx, db) }
