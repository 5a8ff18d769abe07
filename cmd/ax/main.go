// Command ax runs and operates AX: `ax dev` for the demo, `ax orchestrator`
// in production, and operator commands (submit, status, cancel, dlq, bench).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ax-run/ax/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
