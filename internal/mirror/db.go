package mirror

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"
)

// Open returns a database handle for dsn (go-sql-driver/mysql syntax, e.g.
// "ax:secret@tcp(db.internal:3306)/ax"). It fixes the settings the mirror
// relies on: UTC times parsed into time.Time, interpolated parameters (one
// round trip per multi-row statement) and a dial timeout. It does not
// connect; Ping, Mirror.Start or the first query does. The driver's own
// error log goes to log at debug level (nil: discarded).
func Open(dsn string, log *zerolog.Logger) (*sql.DB, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	nop := zerolog.Nop()
	if log == nil {
		log = &nop
	}
	cfg.Logger = driverLogger{log: log}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open MySQL: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(4)
	db.SetConnMaxLifetime(30 * time.Minute)
	return db, nil
}

// ParseDSN parses and normalises a MySQL DSN the way Open uses it, with an
// error that says what a DSN looks like.
func ParseDSN(dsn string) (*mysql.Config, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("no MySQL DSN given: pass --mysql-dsn or set AX_MYSQL_DSN, e.g. user:password@tcp(127.0.0.1:3306)/ax")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse MySQL DSN: %w (expected user:password@tcp(host:3306)/database)", err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("MySQL DSN names no database: add one after the slash, e.g. %s@tcp(%s)/ax", cfg.User, cfg.Addr)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.MultiStatements = false
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// Functions such as NOW() must agree with the UTC values written.
	if _, ok := cfg.Params["time_zone"]; !ok {
		cfg.Params["time_zone"] = "'+00:00'"
	}
	return cfg, nil
}

// driverLogger routes the driver's messages (e.g. "unexpected EOF" when a
// connection is cut) to zerolog at debug level: the mirror logs the
// resulting errors itself.
type driverLogger struct{ log *zerolog.Logger }

// Print implements mysql.Logger.
func (l driverLogger) Print(v ...any) {
	l.log.Debug().Str("component", "mysql_driver").Msg(strings.TrimSpace(fmt.Sprint(v...)))
}

// MySQL server error numbers the mirror treats specially.
const (
	errDBAccessDenied      = 1044
	errAccessDenied        = 1045
	errBadDB               = 1049
	errTableAccessDenied   = 1142
	errColumnAccessDenied  = 1143
	errSpecificAccess      = 1227
	errProcAccessDenied    = 1370
	errTooManyConnections  = 1040
	errServerShutdown      = 1053
	errLockWaitTimeout     = 1205
	errLockDeadlock        = 1213
	errQueryInterrupted    = 1317
	errReadOnly            = 1290
	errConnectionKilled    = 1927
	errOptionReadOnly      = 1836
	errNetReadInterrupted  = 1159
	errNetWriteInterrupted = 1161
)

// transient reports whether err may go away by itself (MySQL restarting,
// the network, a deadlock), as opposed to a problem an operator must fix
// (credentials, privileges, schema).
func transient(err error) bool {
	if err == nil {
		return false
	}
	var tooNew *SchemaTooNewError
	if errors.As(err, &tooNew) {
		return false
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case errTooManyConnections, errServerShutdown, errLockWaitTimeout, errLockDeadlock, errQueryInterrupted,
			errReadOnly, errConnectionKilled, errOptionReadOnly, errNetReadInterrupted, errNetWriteInterrupted:
			return true
		}
		return false
	}
	var ne net.Error
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		errors.As(err, &ne)
}

// Explain turns an error from connecting to or querying the database named
// by dsn into one that says what to do (wrong password, missing database,
// missing privilege, MySQL not running); other errors are returned as is.
func Explain(err error, dsn string) error {
	cfg, perr := ParseDSN(dsn)
	if perr != nil {
		cfg = nil
	}
	return explain(err, cfg)
}

// explain turns the errors an operator meets when starting the mirror into
// messages that say what to do. cfg may be nil.
func explain(err error, cfg *mysql.Config) error {
	if err == nil {
		return nil
	}
	user, addr, dbName := "the configured user", "the configured address", "the configured database"
	grantTo, grantOn := "'<user>'@'%'", "`<database>`.*"
	if cfg != nil {
		user, addr, dbName = fmt.Sprintf("%q", cfg.User), cfg.Addr, fmt.Sprintf("%q", cfg.DBName)
		grantTo, grantOn = fmt.Sprintf("'%s'@'%%'", cfg.User), fmt.Sprintf("`%s`.*", cfg.DBName)
	}
	var my *mysql.MySQLError
	if errors.As(err, &my) {
		switch my.Number {
		case errAccessDenied:
			return fmt.Errorf("MySQL at %s rejected user %s: wrong user name or password: %w", addr, user, err)
		case errBadDB:
			return fmt.Errorf("database %s does not exist on MySQL at %s: create it first (CREATE DATABASE ...): %w", dbName, addr, err)
		case errDBAccessDenied, errTableAccessDenied, errColumnAccessDenied, errSpecificAccess, errProcAccessDenied:
			return fmt.Errorf("MySQL user %s lacks a privilege the mirror needs on database %s; grant them with "+
				"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP ON %s TO %s: %w",
				user, dbName, grantOn, grantTo, err)
		}
		return err
	}
	if transient(err) {
		return fmt.Errorf("reach MySQL at %s: %w (is it running? scripts/ensure-mysql starts one for development)", addr, err)
	}
	return err
}

// checkPrivileges runs, on every mirror table, statements that need each
// privilege the mirror uses but change nothing, so a missing grant is
// reported at start rather than when the first batch is written.
func checkPrivileges(ctx context.Context, db *sql.DB) error {
	probes := []string{
		"SELECT 1 FROM %s LIMIT 0",
		"INSERT INTO %[1]s SELECT * FROM %[1]s WHERE 1 = 0",
		"UPDATE %s SET last_seq = last_seq WHERE 1 = 0",
		"DELETE FROM %s WHERE 1 = 0",
	}
	for _, table := range []string{"ax_events", "ax_tasks", "ax_attempts"} {
		for _, p := range probes {
			q := fmt.Sprintf(p, table)
			if table == "ax_events" {
				q = strings.ReplaceAll(q, "last_seq", "seq")
			}
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("check privileges on %s: %w", table, err)
			}
		}
	}
	return nil
}

// prepare pings the database, migrates its schema and checks privileges:
// everything the mirror needs before it writes. Errors are explained.
func prepare(ctx context.Context, db *sql.DB, cfg *mysql.Config) (int, error) {
	if err := db.PingContext(ctx); err != nil {
		return 0, explain(err, cfg)
	}
	v, err := Migrate(ctx, db)
	if err != nil {
		var tooNew *SchemaTooNewError
		if errors.As(err, &tooNew) {
			return v, err
		}
		return v, explain(err, cfg)
	}
	if err := checkPrivileges(ctx, db); err != nil {
		return v, explain(err, cfg)
	}
	return v, nil
}
