package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// limitsCmd is `ax limits`: list, set and remove the run-time key limits
// (task.KeyLimit).
func limitsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List the key limits set at run time and the concurrency keys in use; set or remove one",
		Long: `Key limits bound the tasks of each concurrency key (a spec's concurrency_key)
matching a pattern: at most N dispatched or running at once across the
cluster (optionally adaptive), at most N starts per window; and weigh each
fairness key's (fairness_key) share of dispatches. "*" matches one token,
a final ">" one or more; the most specific matching pattern wins.

Without a subcommand: the limits in force, set at run time (ax limits set)
or from the orchestrators' configuration (ax orchestrator --key-limit;
SOURCE "config"), and, for each, the concurrency keys in use (the first ` + strconv.Itoa(sdk.MaxLimitKeys) + `) with their slots.`,
		Example: `  ax limits
  ax limits set 'customer.*' --concurrency 5 --reason "one customer must not take every worker"
  ax limits set 'api.partner.>' --rate 100 --per 1m
  ax limits set 'gateway.*' --concurrency 20 --adaptive --min 2 --target-latency 2s
  ax limits set 'tenant.enterprise' --weight 5
  ax limits rm 'customer.*' --reason "import done"`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			ls, err := c.Limits(ctx)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(ls)
			}
			return printLimits(g.stdout, ls)
		}),
	}
	cmd.AddCommand(limitSetCmd(g), limitRmCmd(g))
	return cmd
}

func limitSetCmd(g *globals) *cobra.Command {
	var (
		l             task.KeyLimit
		per, target   time.Duration
		reason        string
		minConcurrent int
	)
	cmd := &cobra.Command{
		Use:   "set PATTERN",
		Short: "Set (or replace) the run-time limit of a key pattern",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			l.Key, l.Per, l.TargetLatency, l.MinConcurrency = args[0], task.Duration(per), task.Duration(target), minConcurrent
			if err := c.SetLimit(ctx, l, reason); err != nil {
				return err
			}
			if g.jsonOutput() {
				l.Reason = reason // as stored; the orchestrator adds who and when
				return g.printJSON(l)
			}
			fmt.Fprintf(g.stdout, "limit %s set: %s\n", l.Key, describeLimit(l))
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&l.Concurrency, "concurrency", 0, fmt.Sprintf("most tasks of one key dispatched or running at once (1…%d)", task.MaxKeyConcurrency))
	f.IntVar(&l.Rate, "rate", 0, "most starts of one key per --per")
	f.DurationVar(&per, "per", 0, "the rate's window (default 1s)")
	f.BoolVar(&l.Adaptive, "adaptive", false, "move the concurrency limit between --min and --concurrency by the attempts' outcomes (AIMD)")
	f.IntVar(&minConcurrent, "min", 0, "the adaptive limit's floor (default 1)")
	f.DurationVar(&target, "target-latency", 0, "lower the adaptive limit when a successful attempt took longer")
	f.IntVar(&l.Weight, "weight", 0, "a fairness key's share of its level's dispatches (default 1, at most 1000)")
	f.StringVar(&reason, "reason", "", "reason recorded with the limit and in the audit trail")
	return cmd
}

func limitRmCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "rm PATTERN",
		Aliases: []string{"delete"},
		Short:   "Remove the run-time limit of a key pattern (the orchestrators' configured one, if any, applies again)",
		Args:    cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			if err := c.DeleteLimit(ctx, args[0], reason); err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(map[string]any{"key": args[0], "removed": true})
			}
			fmt.Fprintf(g.stdout, "limit %s removed\n", args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "reason recorded in the audit trail")
	return cmd
}

// configured names the entry of sdk.Limits that gathers the keys no
// limit matches (a limit removed while tasks of its keys hold slots).
const configured = "(no limit)"

// printLimits prints the limits, then every key in use.
func printLimits(out io.Writer, ls []sdk.LimitStatus) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PATTERN\tLIMIT\tKEYS\tSOURCE\tSET BY\tAT\tREASON")
	keys := 0
	for _, s := range ls {
		keys += len(s.Keys)
		if s.Limit.Key == "" {
			continue
		}
		source := "run time"
		if s.Configured {
			source = "config"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Limit.Key, describeLimit(s.Limit), len(s.Keys), source,
			orDash(s.Limit.By), timeOrDash(s.Limit.At), orDash(s.Limit.Reason))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if keys == 0 {
		fmt.Fprintln(out, "\nNo concurrency key in use.")
		return nil
	}
	fmt.Fprintln(out, "\nConcurrency keys in use:")
	return printKeys(out, ls, func(task.KeyLimit, sdk.KeyUsage) bool { return true })
}

// printKeys prints the keys of ls that pass keep (given the limit that
// governs the key), with that limit's pattern; it prints nothing when none
// passes.
func printKeys(out io.Writer, ls []sdk.LimitStatus, keep func(task.KeyLimit, sdk.KeyUsage) bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	header := false
	for _, s := range ls {
		pattern := s.Limit.Key
		if pattern == "" {
			pattern = configured
		}
		for _, u := range s.Keys {
			if !keep(s.Limit, u) {
				continue
			}
			if !header {
				fmt.Fprintln(w, "  KEY\tPATTERN\tIN USE\tLIMIT\tADAPTIVE")
				header = true
			}
			limit := "?"
			if u.Limit > 0 {
				limit = strconv.Itoa(u.Limit)
			}
			adaptive := "-"
			if u.Adaptive > 0 {
				adaptive = strconv.FormatFloat(u.Adaptive, 'f', 2, 64)
			}
			note := ""
			if u.Full() {
				note = "full"
			}
			fmt.Fprintf(w, "  %s\t%s\t%d\t%s\t%s\t%s\n", u.Key, pattern, u.InUse, limit, adaptive, note)
		}
	}
	return w.Flush()
}

// printLimitsSummary is ax status's section on key limits: the run-time
// limits, and the keys at or near their limit.
func printLimitsSummary(out io.Writer, ls []sdk.LimitStatus, err error) error {
	fmt.Fprintln(out, "\nKey limits:")
	if err != nil {
		fmt.Fprintf(out, "  not readable: %v\n", err)
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	n := 0
	for _, s := range ls {
		if s.Limit.Key == "" {
			continue
		}
		n++
		keys := "keys"
		if len(s.Keys) == 1 {
			keys = "key"
		}
		fmt.Fprintf(w, "  %s\t%s\t%d %s in use\t%s\n", s.Limit.Key, describeLimit(s.Limit), len(s.Keys), keys, orDash(s.Limit.Reason))
	}
	if n == 0 {
		fmt.Fprintln(w, "  none")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	near := 0
	for _, s := range ls {
		for _, u := range s.Keys {
			if nearLimit(s.Limit, u) {
				near++
			}
		}
	}
	if near == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nKeys at or near their limit:")
	return printKeys(out, ls, nearLimit)
}

// nearLimit reports whether a key uses at least 80 % of its slots, or has
// an adaptive limit lowered below its limit's concurrency.
func nearLimit(l task.KeyLimit, u sdk.KeyUsage) bool {
	lowered := u.Adaptive > 0 && l.Concurrency > 0 && u.Adaptive < float64(l.Concurrency)
	return lowered || (u.Limit > 0 && 5*u.InUse >= 4*u.Limit)
}

// describeLimit says what a limit sets, in one line.
func describeLimit(l task.KeyLimit) string {
	var parts []string
	if l.Concurrency > 0 {
		c := "concurrency " + strconv.Itoa(l.Concurrency)
		if l.Adaptive {
			c += fmt.Sprintf(" (adaptive, min %d", l.Floor())
			if l.TargetLatency > 0 {
				c += ", target latency " + l.TargetLatency.Std().String()
			}
			c += ")"
		}
		parts = append(parts, c)
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %d per %s", l.Rate, l.Window()))
	}
	if l.Weight > 0 {
		parts = append(parts, "weight "+strconv.Itoa(l.Weight))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
