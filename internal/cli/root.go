// Package cli implements the ax command line. cmd/ax only wires signals to
// Run, so every command is testable in-process.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/natsconn"
	"github.com/ax-run/ax/sdk"
)

// DefaultNATSURL is used when neither --nats nor AX_NATS_URL is set.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// globals are the flags every command shares.
type globals struct {
	nats      natsconn.Settings  // connection flags (natsflags.go)
	resolved  *natsconn.Resolved // nats resolved once per command
	logLevel  string
	logFormat string
	output    string
	caller    string // --as: who sends commands (sdk.Client.Caller)
	stdout    io.Writer
	stderr    io.Writer
}

// Run executes the ax command line and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "ax",
		Short:         "AX: an event-driven task orchestrator on NATS JetStream",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	pf := root.PersistentFlags()
	g.addNATSFlags(pf)
	pf.StringVar(&g.logLevel, "log-level", envOr("AX_LOG_LEVEL", "info"), "log level: debug, info, warn, error (env AX_LOG_LEVEL)")
	pf.StringVar(&g.logFormat, "log-format", envOr("AX_LOG_FORMAT", logFormatText), "log format on stderr: text (coloured only on a terminal) or json, one object per line; RFC 3339 times (env AX_LOG_FORMAT)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.checkLogFlags() }
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&g.caller, "as", os.Getenv("AX_AS"), "send commands as this caller, recorded with what they change: ax.cmd.as.<name>.… (with per-user permissions, your NATS user's own name; env AX_AS)")
	for _, c := range commands(g) {
		root.AddCommand(c)
	}
	markUsageErrors(root)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "ax:", err)
		if g.jsonOutput() || jsonAsked(args) {
			_ = g.printJSON(errorJSON(err))
		}
		return 1
	}
	return 0
}

// commands lists the subcommands; each file adds its own constructor here.
func commands(g *globals) []*cobra.Command {
	return []*cobra.Command{
		devCmd(g), orchestratorCmd(g), serverCmd(g), workerCmd(g),
		submitCmd(g), statusCmd(g), cancelCmd(g), approveCmd(g), dlqCmd(g), redriveCmd(g), rejectedCmd(g), benchCmd(g), scheduleCmd(g), pauseCmd(g), resumeCmd(g), limitsCmd(g), mirrorCmd(g), auditCmd(g), topologyCmd(g), poisonCmd(g), consoleCmd(g),
		relayCmd(g), planCmd(g), natsAccountsCmd(g), migrateCmd(g), versionCmd(g), healthcheckCmd(g), workersCmd(g), tasksCmd(g),
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// connect dials the configured NATS server with the configured
// credentials; its error holds no secret.
func (g *globals) connect(name string) (*nats.Conn, error) {
	r, err := g.natsConn()
	if err != nil {
		return nil, err
	}
	nc, err := r.Connect(nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("%w (start one with `ax server`, or set --nats)", err)
	}
	return nc, nil
}

// client connects and returns an SDK client that owns the connection.
func (g *globals) client(ctx context.Context) (*sdk.Client, error) {
	r, err := g.natsConn()
	if err != nil {
		return nil, err
	}
	c, err := sdk.Connect(ctx, r.URL, append(r.Options, nats.Name("ax-cli"))...)
	if err != nil {
		return nil, r.Scrub(err)
	}
	c.Caller = g.caller
	return c, nil
}

// withClient makes a command's RunE that connects an SDK client for fn and
// closes it afterwards.
func (g *globals) withClient(fn func(ctx context.Context, c *sdk.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, err := g.client(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(ctx, c, args)
	}
}

// withJetStream makes a command's RunE that connects and hands fn a
// JetStream context, closing the connection afterwards.
func (g *globals) withJetStream(fn func(ctx context.Context, js jetstream.JetStream, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		nc, err := g.connect("ax-cli")
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("jetstream: %w", err)
		}
		return fn(cmd.Context(), js, args)
	}
}

// printJSON writes v as indented JSON, empty lists as [] (see output.go).
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(emptyNotNull(v))
}

func (g *globals) jsonOutput() bool { return g.output == "json" }

// markUsageErrors makes the errors of the command line itself — an
// unknown command or flag, a wrong number of arguments — usage errors
// (-o json code "invalid") throughout the command tree. A group of
// commands (ax, ax dlq, …) run without a subcommand prints its help; with
// an unknown one it fails.
func markUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError(fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
				}
				return cmd.Help()
			}
		case c.Args != nil:
			args := c.Args
			c.Args = func(cmd *cobra.Command, a []string) error { return usageError(args(cmd, a)) }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// jsonAsked reports whether args ask for -o json: for an error in the
// command line itself, which stops parsing before the flag is read.
func jsonAsked(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-ojson", a == "--output=json", a == "-o=json":
			return true
		case (a == "-o" || a == "--output") && i+1 < len(args) && args[i+1] == "json":
			return true
		}
	}
	return false
}
