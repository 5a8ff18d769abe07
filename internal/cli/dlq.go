package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// dlqRmCmd is `ax dlq rm`: discard dead letters by id, or those matching
// a search.
func dlqRmCmd(g *globals) *cobra.Command {
	var (
		typ, errText, reason string
		olderThan            time.Duration
		all, dryRun          bool
	)
	cmd := &cobra.Command{
		Use:   "rm [ID...]",
		Short: "Discard dead letters for good: by id, or those matching --type/--error/--older-than (or --all); audited",
		Long: `Discards dead letters from AX_DLQ: the orchestrator removes each and records
an audit event (kind dlq) naming you (--as) and --reason. The tasks' records
stay failed: they can still be re-driven. Give task ids, or select by search:
--type, --error (a text the last error contains), --older-than (failed at
least this long ago), or --all. --dry-run lists what would go.`,
		Example: `  ax dlq rm report-42 --reason "customer closed"
  ax dlq rm --type email.send --error "mailbox full" --dry-run
  ax dlq rm --older-than 720h --reason "a month old"`,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			search := typ != "" || errText != "" || olderThan > 0 || all
			switch {
			case len(args) > 0 && search:
				return usageError(errors.New("give task ids or a search (--type, --error, --older-than, --all), not both"))
			case len(args) == 0 && !search:
				return usageError(errors.New("give the task ids to discard, or a search: --type, --error, --older-than or --all"))
			}
			ids := args
			if search {
				dls, err := c.DeadLetters(ctx)
				if err != nil {
					return err
				}
				ids = nil
				for _, d := range dls {
					if deadLetterMatches(d, typ, errText, olderThan, time.Now()) {
						ids = append(ids, d.Spec.ID)
					}
				}
			}
			out := dlqRmJSON{DryRun: dryRun, Discarded: []string{}}
			if dryRun {
				out.Discarded = append(out.Discarded, ids...)
				return printDLQRm(g, out)
			}
			var failed []error
			for _, id := range ids {
				if err := c.DiscardDeadLetter(ctx, id, reason); err != nil {
					if len(ids) == 1 {
						return err
					}
					failed = append(failed, err)
					continue
				}
				out.Discarded = append(out.Discarded, id)
			}
			if len(failed) > 0 {
				if !g.jsonOutput() {
					_ = printDLQRm(g, out)
				}
				return fmt.Errorf("%d of %d dead letters not discarded: %w", len(failed), len(ids), errors.Join(failed...))
			}
			return printDLQRm(g, out)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&typ, "type", "", "search: dead letters of this task type")
	f.StringVar(&errText, "error", "", "search: dead letters whose last error (or reason) contains this text")
	f.DurationVar(&olderThan, "older-than", 0, "search: dead letters that failed at least this long ago")
	f.BoolVar(&all, "all", false, "every dead letter")
	f.BoolVar(&dryRun, "dry-run", false, "list what would be discarded; discard nothing")
	f.StringVar(&reason, "reason", "", "reason recorded in the audit trail")
	return cmd
}

// dlqRmJSON is what ax dlq rm prints with -o json.
type dlqRmJSON struct {
	Discarded []string `json:"discarded"`
	DryRun    bool     `json:"dry_run"`
}

func printDLQRm(g *globals, out dlqRmJSON) error {
	if g.jsonOutput() {
		return g.printJSON(out)
	}
	verb := "discarded"
	if out.DryRun {
		verb = "would discard"
	}
	for _, id := range out.Discarded {
		fmt.Fprintf(g.stdout, "%s %s\n", verb, id)
	}
	fmt.Fprintf(g.stdout, "%s %d dead letter(s)\n", verb, len(out.Discarded))
	return nil
}

// deadLetterMatches reports whether d matches a dlq rm search (empty
// criteria match everything).
func deadLetterMatches(d task.DeadLetter, typ, errText string, olderThan time.Duration, now time.Time) bool {
	if typ != "" && d.Spec.Type != typ {
		return false
	}
	if errText != "" {
		last := d.Reason
		if n := len(d.Attempts); n > 0 && d.Attempts[n-1].Error != "" {
			last = d.Attempts[n-1].Error + "\n" + d.Reason
		}
		if !strings.Contains(last, errText) {
			return false
		}
	}
	return olderThan <= 0 || now.Sub(d.FailedAt) >= olderThan
}
