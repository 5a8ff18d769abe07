package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/workers"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func workersCmd(g *globals) *cobra.Command {
	var capability string
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List the executors running now (idle ones too) and what runs on each, from the workers registry",
		Long: `Lists the executors in the workers registry (AX_WORKERS): each running
executor announces its capabilities, handled task types, capacity and load,
the handlers running on it and since when (with their progress), its
version and its last heartbeat. A handler shows within a quarter second of
starting; an executor that stops leaves the list at once, one whose process
died when its announcement expires (three announce intervals, 15 s by
default).`,
		Example: `  ax workers
  ax workers --capability gpu -o json`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			ws, err := c.Workers(ctx)
			if err != nil {
				return err
			}
			if capability != "" {
				ws = slices.DeleteFunc(ws, func(w task.Worker) bool { return !slices.Contains(w.Capabilities, capability) })
			}
			if g.jsonOutput() {
				return g.printJSON(ws)
			}
			printWorkers(g, ws, time.Now())
			return nil
		}),
	}
	cmd.Flags().StringVar(&capability, "capability", "", "only the executors serving this capability")
	return cmd
}

// printWorkers prints the executors, then what runs on each now.
func printWorkers(g *globals, ws []task.Worker, now time.Time) {
	if len(ws) == 0 {
		fmt.Fprintln(g.stdout, "No executor is running (none announced itself in the workers registry).")
		return
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EXECUTOR\tCAPABILITIES\tTYPES\tLOAD\tRUNNING\tVERSION\tHOST\tUP\tHEARTBEAT")
	for _, x := range ws {
		fmt.Fprintf(w, "%s\t%s\t%s\t%g/%g\t%d\t%s\t%s\t%s\t%s\n", x.ID, strings.Join(x.Capabilities, ","), orDash(strings.Join(x.Types, ",")),
			x.InFlight, x.Capacity, x.RunningTotal, x.Version, orDash(x.Host), strings.TrimSuffix(ago(now, x.StartedAt), " ago"), ago(now, x.HeartbeatAt))
	}
	_ = w.Flush()
	running := 0
	for _, x := range ws {
		running += len(x.Running)
	}
	if running == 0 {
		fmt.Fprintln(g.stdout, "\nRunning now: nothing (every executor is idle).")
		return
	}
	fmt.Fprintln(g.stdout, "\nRunning now:")
	w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EXECUTOR\tTASK\tTYPE\tATTEMPT\tSINCE\tPROGRESS")
	for _, x := range ws {
		for _, r := range x.Running {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s (%s)\t%s\n", x.ID, r.TaskID, r.Type, r.Attempt, r.Since.Format(time.RFC3339), ago(now, r.Since), progressText(r.Progress))
		}
		if n := x.RunningTotal - len(x.Running); n > 0 {
			fmt.Fprintf(w, "%s\t… and %d more\t\t\t\t\n", x.ID, n)
		}
	}
	_ = w.Flush()
}

// progressText is a handler's last progress report, "-" without one.
func progressText(p *task.Progress) string {
	if p == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f%%", p.Percent)
	if p.Message != "" {
		s += " " + p.Message
	}
	return s
}

// ago is how long before now t was, rounded for reading ("3s ago",
// "2m10s ago"); "-" for no time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		d = 0
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return d.String() + " ago"
}

// runningNowJSON is `ax status ID -o json`'s "running_now": the executor
// whose announcement lists the task's current execution.
type runningNowJSON struct {
	Executor string `json:"executor"`
	task.WorkerExecution
}

// runningNow finds the handler of t's current execution in the workers
// registry; nil for a task that ended, one not running, or a registry
// this user may not read. For a ready task that runs nowhere, unserved
// says why no executor running now can take it ("" when one can).
func runningNow(ctx context.Context, c *sdk.Client, t *task.Task) (live *runningNowJSON, unserved string) {
	if t.State.Terminal() {
		return nil, ""
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		return nil, ""
	}
	if id, x, ok := workers.Running(ws, t.ID, t.ExecutionID); ok {
		return &runningNowJSON{Executor: id, WorkerExecution: x}, ""
	}
	if t.State == task.Ready {
		unserved = workers.Unserved(ws, t.Capability, t.Type)
	}
	return nil, unserved
}

// printRunningNow adds where a task's handler runs now to ax status, or
// why no executor can take it.
func printRunningNow(g *globals, t *task.Task, r *runningNowJSON, unserved string) {
	if unserved != "" {
		fmt.Fprintf(g.stdout, "%-12s%s\n", "Waiting", unserved) // printTask's column
	}
	if r == nil {
		return
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	defer w.Flush()
	note := ""
	if t.State == task.Ready {
		note = " (its handler started; the record says ready until the attempt outlives a heartbeat)"
	}
	fmt.Fprintf(w, "Running on\texecutor %s since %s, %s%s\n", r.Executor, r.Since.Format(time.RFC3339Nano), ago(time.Now(), r.Since), note)
	fmt.Fprintf(w, "Progress\t%s\n", progressText(r.Progress))
}

// printWorkersSummary is ax status's line on the executors.
func printWorkersSummary(g *globals, ws []task.Worker, err error) {
	if err != nil {
		fmt.Fprintf(g.stdout, "Executors\tworkers registry not readable: %v\n", err)
		return
	}
	idle, running := 0, 0
	for _, w := range ws {
		if w.RunningTotal == 0 {
			idle++
		}
		running += w.RunningTotal
	}
	fmt.Fprintf(g.stdout, "Executors  %d running (%d idle), %d handlers running now (ax workers)\n", len(ws), idle, running)
}
