package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ax-run/ax/sdk"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/task"
)

func scheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "Create, list, pause, resume and delete recurring schedules"}
	var (
		s       task.Schedule
		typ     string
		payload string
		timeout time.Duration
		ttl     time.Duration
		graph   string
	)
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create or replace a schedule",
		Example: `  ax schedule create nightly-report --cron "0 2 * * *" --tz Europe/Berlin --type report.build
  ax schedule create heartbeat --cron "@every 30s" --type ping --overlap allow
  ax schedule create nightly-etl --cron "0 3 * * *" -f etl.json      # a whole graph {"tasks":[…]} each night`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			if s.Cron == "" || (typ == "") == (graph == "") {
				return usageError(errors.New(`required flags: "cron", and "type" or a graph file (-f)`))
			}
			s.Name = args[0]
			s.Template.Type = typ
			if payload != "" {
				s.Template.Payload = json.RawMessage(payload)
			}
			s.Template.Timeout = task.Duration(timeout)
			s.Template.TTL = task.Duration(ttl)
			if graph != "" {
				data, err := os.ReadFile(graph)
				if err != nil {
					return usageError(err)
				}
				g, err := task.DecodeGraph(data)
				if err != nil {
					return usageError(fmt.Errorf("%s: %w", graph, err))
				}
				s.Graph, s.Template = g.Tasks, task.Spec{}
			}
			got, err := c.CreateSchedule(ctx, s)
			if err != nil {
				return err
			}
			return printSchedule(g, got)
		}),
	}
	s.Template.Priority, s.Template.MaxRetries = new(task.DefaultPriority), new(task.DefaultMaxRetries)
	f := create.Flags()
	f.StringVar(&s.Cron, "cron", "", "5-field (minute first) or 6-field (seconds first) cron, @hourly…, or \"@every 30s\" (required)")
	f.StringVar(&s.TimeZone, "tz", "", "IANA time zone of the cron fields (default UTC)")
	f.StringVar(&typ, "type", "", "task type of each firing (or -f)")
	f.StringVarP(&graph, "file", "f", "", "a graph {\"tasks\":[…]} each firing creates whole, its ids prefixed with the firing's (instead of --type and the template flags)")
	f.StringVar(&payload, "payload", "", "payload as JSON")
	f.IntVar(s.Template.Priority, "priority", task.DefaultPriority, "priority 0 (highest) … 5 (lowest)")
	f.StringVar(&s.Template.Capability, "capability", task.DefaultCapability, "capability")
	f.IntVar(s.Template.MaxRetries, "max-retries", task.DefaultMaxRetries, "retries of each firing's task")
	f.DurationVar(&timeout, "timeout", task.DefaultTimeout, "execution timeout")
	f.DurationVar(&ttl, "ttl", 0, "expire a firing's task not finished within this")
	f.StringVar(&s.Overlap, "overlap", task.OverlapSkip, "skip (a firing while the previous task runs is skipped) or allow")
	f.BoolVar(&s.CatchUp, "catch-up", false, "after downtime fire every missed slot (up to 1000), not once")
	f.BoolVar(&s.Paused, "paused", false, "create it paused")

	list := &cobra.Command{
		Use:   "list",
		Short: "List schedules",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			ss, err := c.Schedules(ctx)
			if err != nil {
				return err
			}
			return printSchedules(g, ss)
		}),
	}
	action := func(use, short string, do func(c *sdk.Client, ctx context.Context, name string) (*task.Schedule, error)) *cobra.Command {
		return &cobra.Command{Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
				s, err := do(c, ctx, args[0])
				if err != nil {
					return err
				}
				if s == nil {
					if g.jsonOutput() {
						return g.printJSON(map[string]any{"name": args[0], "deleted": true})
					}
					fmt.Fprintf(g.stdout, "%s deleted\n", args[0])
					return nil
				}
				return printSchedule(g, s)
			})}
	}
	pause := action("pause", "Stop a schedule from firing", (*sdk.Client).PauseSchedule)
	resume := action("resume", "Let a paused schedule fire again, from now", (*sdk.Client).ResumeSchedule)
	del := action("delete", "Delete a schedule (its tasks stay)", func(c *sdk.Client, ctx context.Context, name string) (*task.Schedule, error) {
		return nil, c.DeleteSchedule(ctx, name)
	})
	cmd.AddCommand(create, list, pause, resume, del)
	return cmd
}

// printSchedule prints one schedule: an object with -o json.
func printSchedule(g *globals, s *task.Schedule) error {
	if g.jsonOutput() {
		return g.printJSON(s)
	}
	return printSchedules(g, []task.Schedule{*s})
}

func printSchedules(g *globals, ss []task.Schedule) error {
	if g.jsonOutput() {
		return g.printJSON(ss)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCRON\tTZ\tTYPE\tOVERLAP\tPAUSED\tNEXT FIRE\tLAST TASK\tSKIPPED")
	for _, s := range ss {
		next := "-"
		if s.NextFire != nil {
			next = s.NextFire.Format(time.RFC3339)
		}
		tz := s.TimeZone
		if tz == "" {
			tz = "UTC"
		}
		what := s.Template.Type
		if len(s.Graph) > 0 {
			what = fmt.Sprintf("graph of %d tasks", len(s.Graph))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%d\n", s.Name, s.Cron, tz, what, s.Overlap, s.Paused, next, s.LastTaskID, s.Skipped)
	}
	return w.Flush()
}
