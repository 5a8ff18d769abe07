package cli

import (
	"context"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/ax-run/ax/sdk"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/queue"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/internal/topology"
)

func pauseCmd(g *globals) *cobra.Command {
	var typ, reason string
	var retriesOnly bool
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Pause dispatch (or only retries) of one task type or of all; durable until ax resume",
		Example: `  ax pause --type payment.charge --reason "gateway maintenance"
  ax pause --retries-only --reason "retry storm"`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			if err := c.Pause(ctx, typ, retriesOnly, reason); err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(pauseJSON{Type: typ, Paused: true, RetriesOnly: retriesOnly})
			}
			fmt.Fprintf(g.stdout, "paused %s\n", scopeName(typ))
			return nil
		}),
	}
	cmd.Flags().StringVar(&typ, "type", "", "task type (default: every type)")
	cmd.Flags().BoolVar(&retriesOnly, "retries-only", false, "hold only retries; new tasks still run")
	cmd.Flags().StringVar(&reason, "reason", "", "reason recorded in the audit trail")
	return cmd
}

func resumeCmd(g *globals) *cobra.Command {
	var typ, reason string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Lift a pause and release the tasks it held",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			if err := c.Resume(ctx, typ, reason); err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(pauseJSON{Type: typ, Paused: false})
			}
			fmt.Fprintf(g.stdout, "resumed %s\n", scopeName(typ))
			return nil
		}),
	}
	cmd.Flags().StringVar(&typ, "type", "", "task type (default: the pause of every type)")
	cmd.Flags().StringVar(&reason, "reason", "", "reason recorded in the audit trail")
	return cmd
}

// pauseJSON is what ax pause and ax resume print with -o json: the scope
// ("" type: every type) and its state now.
type pauseJSON struct {
	Type        string `json:"type"`
	Paused      bool   `json:"paused"`
	RetriesOnly bool   `json:"retries_only"`
}

func scopeName(typ string) string {
	if typ == "" {
		return "all task types"
	}
	return "task type " + typ
}

// overview prints the system's state: pauses, breakers, key limits,
// backlogs.
func overview(cmd *cobra.Command, g *globals) error {
	ctx := cmd.Context()
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	gates, err := c.Gates(ctx)
	if err != nil {
		return err
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		return err
	}
	backlog := map[string]uint64{}
	for _, name := range topology.Queues {
		if backlog[name], err = queue.Depth(ctx, js, name); err != nil {
			return err
		}
	}
	if backlog["ready"], err = queue.ReadyDepth(ctx, js); err != nil {
		return err
	}
	for _, name := range []string{subject.StreamDLQ, subject.StreamHeld} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		backlog[name] = info.State.Msgs
	}
	audit, err := c.AuditEvents(ctx, 10)
	if err != nil {
		return err
	}
	// Limits unreadable (a deployment whose rights predate AX_SLOTS)
	// leave the rest of the overview.
	limits, limitsErr := c.Limits(ctx)
	workers, workersErr := c.Workers(ctx)
	if g.jsonOutput() {
		out := map[string]any{"gates": gates, "backlog": backlog, "recent_audit": audit, "limits": limits, "workers": workers}
		if workersErr != nil {
			out["workers_error"] = workersErr.Error()
			delete(out, "workers")
		}
		if limitsErr != nil {
			out["limits_error"] = limitsErr.Error()
			delete(out, "limits")
		}
		return g.printJSON(out)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Backlog\tsubmissions %d\tready %d\treports %d\theld %d\tdead letters %d\n",
		backlog[subject.StreamSubmit], backlog["ready"], backlog[subject.StreamCompleted], backlog[subject.StreamHeld], backlog[subject.StreamDLQ])
	_ = w.Flush()
	printWorkersSummary(g, workers, workersErr)
	fmt.Fprintln(g.stdout, "\nPauses:")
	if len(gates.Pauses) == 0 {
		fmt.Fprintln(g.stdout, "  none")
	}
	for typ, p := range gates.Pauses {
		what := "dispatch"
		if p.RetriesOnly {
			what = "retries"
		}
		fmt.Fprintf(g.stdout, "  %s: %s paused since %s (%s)\n", scopeName(typ), what, p.At.Format(time.RFC3339), p.Reason)
	}
	fmt.Fprintln(g.stdout, "\nCircuit breakers:")
	types := make([]string, 0, len(gates.Breakers))
	for t := range gates.Breakers {
		types = append(types, t)
	}
	sort.Strings(types)
	w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  TYPE\tSTATE\tSINCE\tFAILURE RATIO\tVOLUME")
	for _, t := range types {
		b := gates.Breakers[t]
		fmt.Fprintf(w, "  %s\t%s\t%s\t%.0f%%\t%d\n", t, b.State, b.Since.Format(time.RFC3339), 100*b.FailureRatio, b.Volume)
	}
	_ = w.Flush()
	if err := printLimitsSummary(g.stdout, limits, limitsErr); err != nil {
		return err
	}
	if len(audit) > 0 {
		fmt.Fprintln(g.stdout, "\nRecent breaker, pause and limit changes:")
		for _, ev := range audit {
			fmt.Fprintf(g.stdout, "  %s  %s %s: %s -> %s  %s\n", ev.At.Format(time.RFC3339), ev.Kind, ev.Key, ev.From, ev.To, ev.Reason)
		}
	}
	return nil
}
