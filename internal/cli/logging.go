package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Logs: every command logs to stderr in one format, its own and that of
// the orchestrators, executors, mirrors and relays it runs (they log
// through *slog.Logger, handed the same logger: slogger). --log-format
// text (the default) is one line per event, coloured only when stderr is
// a terminal (and NO_COLOR is unset), or json, one object per line; both
// with RFC 3339 times in UTC with milliseconds.

// logTimeFormat is RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Log formats (--log-format).
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

func init() {
	// The JSON logs' "time" (zerolog's package-level setting: the ax
	// binary is this package's only user).
	zerolog.TimeFieldFormat = logTimeFormat
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

// checkLogFlags validates --log-level and --log-format.
func (g *globals) checkLogFlags() error {
	if _, err := zerolog.ParseLevel(g.logLevel); err != nil || g.logLevel == "" {
		return usageError(fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel))
	}
	if g.logFormat != logFormatText && g.logFormat != logFormatJSON {
		return usageError(fmt.Errorf("--log-format %q: want text or json", g.logFormat))
	}
	return nil
}

// logger returns the command's logger on stderr, at --log-level in
// --log-format.
func (g *globals) logger() zerolog.Logger {
	lvl, err := zerolog.ParseLevel(g.logLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	var w io.Writer = g.stderr
	if g.logFormat != logFormatJSON {
		w = zerolog.ConsoleWriter{Out: g.stderr, TimeFormat: logTimeFormat, TimeLocation: time.UTC, NoColor: !colour(g.stderr)}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// slogger is log as the *slog.Logger the orchestrator, executors, mirror
// and relay take, so their lines are the command's own format.
func slogger(log zerolog.Logger) *slog.Logger { return slog.New(zerolog.NewSlogHandler(log)) }

// colour reports whether w is a terminal that may be coloured: never a
// file, a pipe or journald, nor when NO_COLOR is set (no-color.org).
func colour(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}
