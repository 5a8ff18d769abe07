package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/console"
	"github.com/ax-run/ax/sdk"
)

// Environment variables of the console's credentials (never flags: a
// command line is visible to every user of the machine).
const (
	envConsoleToken       = "AX_CONSOLE_TOKEN"
	envConsoleViewerToken = "AX_CONSOLE_VIEWER_TOKEN"
	envConsoleCredentials = "AX_CONSOLE_CREDENTIALS_FILE"
)

// defaultConsoleAddr is loopback: the console is reachable from elsewhere
// only when told.
const defaultConsoleAddr = "127.0.0.1:8080"

func consoleCmd(g *globals) *cobra.Command {
	var (
		addr, dsn, credFile string
		requireLogin        bool
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: overview, search, task pages, dead letters, actions",
		Long: `Serve AX's web console against the NATS server (--nats), with the MySQL
audit mirror optional (--mysql-dsn or env ` + envMySQLDSN + `): with it, search and
counts cover every task; without it, search covers the newest task events.

The console is read-only by default. Actions (cancel, re-drive, force re-run,
pause/resume, schedules) need an operator login, configured only through the
environment or a file, never on the command line:
  ` + envConsoleToken + `          an operator token (log in with any name and the token)
  ` + envConsoleViewerToken + `   a read-only token
  ` + envConsoleCredentials + `  a file of users, one per line: "name role secret"
                               (role operator or viewer; secret a password or sha256:<hex>)

It binds to 127.0.0.1 unless --addr says otherwise; on any other address it
needs credentials and every page needs a login.`,
		Example: `  AX_CONSOLE_TOKEN=$(cat ~/.ax-token) ax console --mysql-dsn 'ax:secret@tcp(db:3306)/ax'
  ax console --addr 127.0.0.1:9000 --credentials-file /etc/ax/console-users`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			creds, err := consoleCredentials(credFile)
			if err != nil {
				return err
			}
			c, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			log := g.logger()
			url, stop, err := startConsole(ctx, c, consoleOptions{addr: addr, dsn: mysqlDSNOrEnv(dsn), creds: creds,
				requireLogin: requireLogin, log: log})
			if err != nil {
				return err
			}
			defer stop()
			fmt.Fprintf(g.stdout, "AX console at %s (NATS %s)\n", url, g.natsShown())
			if len(creds) == 0 {
				fmt.Fprintf(g.stdout, "  read-only: set %s or %s to allow actions\n", envConsoleToken, envConsoleCredentials)
			}
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", defaultConsoleAddr, "listen address (loopback unless told otherwise)")
	f.StringVar(&dsn, "mysql-dsn", "", "MySQL DSN of the audit mirror (default: env "+envMySQLDSN+")")
	f.StringVar(&credFile, "credentials-file", "", "file of console users, \"name role secret\" per line (default: env "+envConsoleCredentials+")")
	f.BoolVar(&requireLogin, "require-login", false, "every page needs a login (always on for a non-loopback address)")
	return cmd
}

// consoleCredentials gathers the credentials from the environment and the
// credentials file.
func consoleCredentials(file string) ([]console.Credential, error) {
	var creds []console.Credential
	if t := os.Getenv(envConsoleToken); t != "" {
		creds = append(creds, console.Credential{Role: console.RoleOperator, Secret: t})
	}
	if t := os.Getenv(envConsoleViewerToken); t != "" {
		creds = append(creds, console.Credential{Role: console.RoleViewer, Secret: t})
	}
	if file == "" {
		file = os.Getenv(envConsoleCredentials)
	}
	if file != "" {
		fh, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("console credentials: %w", err)
		}
		defer fh.Close()
		more, err := console.ParseCredentials(fh)
		if err != nil {
			return nil, fmt.Errorf("console credentials %s: %w", file, err)
		}
		creds = append(creds, more...)
	}
	for _, c := range creds {
		if len(c.Secret) < 8 {
			return nil, errors.New("console credentials: a token or password needs at least 8 characters")
		}
	}
	return creds, nil
}

type consoleOptions struct {
	addr         string
	dsn          string
	creds        []console.Credential
	requireLogin bool
	log          zerolog.Logger
}

// startConsole serves the console on opts.addr and returns its URL and a
// stop function.
func startConsole(ctx context.Context, c *sdk.Client, opts consoleOptions) (string, func(), error) {
	host, _, err := net.SplitHostPort(opts.addr)
	if err != nil {
		return "", nil, fmt.Errorf("console address %q: %w", opts.addr, err)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if !loopback {
		if len(opts.creds) == 0 {
			return "", nil, fmt.Errorf("console on %s (not loopback) needs credentials: set %s or %s", opts.addr, envConsoleToken, envConsoleCredentials)
		}
		opts.requireLogin = true
	}
	cfg := console.Config{Client: c, Credentials: opts.creds, RequireLogin: opts.requireLogin, Logger: &opts.log}
	var closeDB func()
	var ping func(context.Context) error // readiness (health.go)
	if opts.dsn != "" {
		db, err := openAuditDB(ctx, opts.dsn)
		if err != nil {
			return "", nil, err
		}
		closeDB, ping = func() { db.Close() }, db.PingContext
		cfg.Auditor = audit.New(db, time.Now)
		cfg.MirrorInfo = "MySQL"
		if mc, err := mysql.ParseDSN(opts.dsn); err == nil {
			cfg.MirrorInfo = mc.Addr + "/" + mc.DBName
		}
	}
	cleanup := func() {
		if closeDB != nil {
			closeDB()
		}
	}
	srv, err := console.New(cfg)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	if err := srv.Start(ctx); err != nil {
		cleanup()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", opts.addr)
	if err != nil {
		_ = srv.Stop(context.Background())
		cleanup()
		return "", nil, fmt.Errorf("console: %w", err)
	}
	hs := &http.Server{Handler: consoleHandler(srv.Handler(), c, ping), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			opts.log.Error().Err(err).Msg("console stopped")
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-done
		_ = srv.Stop(sctx)
		cleanup()
	}
	return "http://" + ln.Addr().String() + "/", stop, nil
}

// startDevConsole starts the console of ax dev on addr, or on a free
// loopback port when addr is taken; "off" (or empty) starts none.
func startDevConsole(ctx context.Context, c *sdk.Client, addr, dsn string, log zerolog.Logger) (string, func(), error) {
	if addr == "" || addr == "off" {
		return "", nil, nil
	}
	creds, err := consoleCredentials("")
	if err != nil {
		return "", nil, err
	}
	opts := consoleOptions{addr: addr, dsn: dsn, creds: creds, log: log}
	url, stop, err := startConsole(ctx, c, opts)
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "listen" {
		opts.addr = "127.0.0.1:0"
		url, stop, err = startConsole(ctx, c, opts)
	}
	return url, stop, err
}
