package cli

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/internal/mirror"
	"github.com/ax-run/ax/task"
)

func auditCmd(g *globals) *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Answer audit questions from the MySQL mirror (timeline, waiting, shards, failures, stuck, retries, rebuild)",
		Long: `Query the MySQL audit mirror written by ` + "`ax mirror`" + `. Answers are as of the
last mirrored event (see ` + "`ax mirror lag`" + `). See docs/mysql-mirror.md for the schema
and ready-made SQL.`,
	}
	cmd.PersistentFlags().StringVar(&dsn, "mysql-dsn", "", "MySQL DSN of the audit database (default: env "+envMySQLDSN+")")
	open := func(ctx context.Context) (*audit.Auditor, func(), error) {
		db, err := openAuditDB(ctx, mysqlDSNOrEnv(dsn))
		if err != nil {
			return nil, nil, err
		}
		return audit.New(db, time.Now), func() { db.Close() }, nil
	}
	cmd.AddCommand(auditTimelineCmd(g, open), auditWaitingCmd(g, open), auditShardsCmd(g, open), auditFailuresCmd(g, open),
		auditStuckCmd(g, open), auditRetriesCmd(g, open), auditRebuildCmd(g, &dsn))
	return cmd
}

type auditOpener func(ctx context.Context) (*audit.Auditor, func(), error)

// run makes a command's RunE that opens the auditor for fn and closes it.
func (open auditOpener) run(fn func(ctx context.Context, a *audit.Auditor, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a, done, err := open(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		return fn(cmd.Context(), a, args)
	}
}

// openAuditDB opens and checks the audit database for reading.
func openAuditDB(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := mirror.Open(dsn, nil)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, mirror.Explain(err, dsn)
	}
	if err := mirror.CheckSchema(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func auditTimelineCmd(g *globals, open auditOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "timeline ID",
		Short: "A task's full history: every event and every attempt (and a sharded task's shard counts)",
		Args:  cobra.ExactArgs(1),
		RunE: open.run(func(ctx context.Context, a *audit.Auditor, args []string) error {
			tl, err := a.Timeline(ctx, args[0])
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(tl)
			}
			if t := tl.Task; t != nil {
				fmt.Fprintf(g.stdout, "Task %s  type %s  state %s  attempt %d of %d  redrives %d\n",
					t.ID, t.Type, t.State, t.Attempt, t.MaxRetries+1, t.Redrives)
				if t.IsShard() {
					fmt.Fprintf(g.stdout, "Shard of %s (#%d)\n", t.ParentID, t.ShardIndex)
				}
				if t.Reason != "" {
					fmt.Fprintf(g.stdout, "Reason: %s\n", t.Reason)
				}
				printAuditDAG(g, t)
			} else {
				fmt.Fprintf(g.stdout, "Task %s (its row was removed by retention)\n", args[0])
			}
			if len(tl.Shards) > 0 {
				fmt.Fprintf(g.stdout, "Shards: %s (see ax audit shards %s)\n", auditShardStates(tl.Shards), args[0])
			}
			fmt.Fprintln(g.stdout, "\nEvents:")
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SEQ\tAT (UTC)\tFROM\tTO\tATTEMPT\tACTOR\tREASON")
			for _, e := range tl.Events {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Seq, e.At.Format(auditTimeLayout), auditDash(e.From), e.To, e.Attempt, e.Actor, auditOneLine(e.Reason))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, "\nAttempts:")
			w = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ATTEMPT\tEXECUTION\tEXECUTOR\tSTARTED (UTC)\tTOOK\tOUTCOME\tERROR")
			for _, at := range tl.Attempts {
				took := "-"
				if at.FinishedAt != nil {
					took = at.FinishedAt.Sub(at.StartedAt).Round(time.Millisecond).String()
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", at.Attempt, at.ExecutionID, auditDash(at.Executor),
					at.StartedAt.Format(auditTimeLayout), took, at.Outcome, auditOneLine(at.Error))
			}
			return w.Flush()
		}),
	}
}

// printAuditDAG prints why a task of a DAG ran or did not: its trigger
// rule, its unique key and the task it duplicated, and the upstream whose
// end cancelled it.
func printAuditDAG(g *globals, t *audit.Task) {
	if t.TriggerRule != "" {
		fmt.Fprintf(g.stdout, "Trigger rule: %s (over %d dependencies)\n", t.TriggerRule, len(t.DependsOn))
	}
	if t.UniqueKey != "" {
		fmt.Fprintf(g.stdout, "Unique key: %q\n", t.UniqueKey)
	}
	if t.DuplicateOf != "" {
		fmt.Fprintf(g.stdout, "Duplicate of: %s (it held the unique key; this task never ran)\n", t.DuplicateOf)
	}
	if t.CancelledBy != "" {
		fmt.Fprintf(g.stdout, "Cancelled by: upstream %s (ax redrive %s --with-dependents re-opens it)\n", t.CancelledBy, t.CancelledBy)
	}
}

func auditWaitingCmd(g *globals, open auditOpener) *cobra.Command {
	return &cobra.Command{
		Use:   "waiting ID",
		Short: "Why a task has not run yet: which dependencies are not done, and their states",
		Args:  cobra.ExactArgs(1),
		RunE: open.run(func(ctx context.Context, a *audit.Auditor, args []string) error {
			r, err := a.Waiting(ctx, args[0])
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(r)
			}
			fmt.Fprintf(g.stdout, "Task %s (%s) is %s\n%s\n", r.Task.ID, r.Task.Type, r.Task.State, r.Explanation)
			if len(r.Blockers) == 0 {
				return nil
			}
			fmt.Fprintln(g.stdout, "\nNot done upstream:")
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "DEPTH\tID\tTYPE\tSTATE\tSINCE\tVIA\tREASON")
			for _, b := range r.Blockers {
				since := "-"
				if b.StateSince != nil {
					since = b.StateSince.Format(auditTimeLayout)
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Depth, b.ID, auditDash(b.Type), b.State, since, b.Via, auditOneLine(b.Reason))
			}
			return w.Flush()
		}),
	}
}

func auditShardsCmd(g *globals, open auditOpener) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "shards PARENT",
		Short: "A sharded task's shards: how many in each state, and which ended without succeeding and why",
		Example: "  ax audit shards nightly-import\n" +
			"  ax audit shards nightly-import --limit 500 -o json",
		Args: cobra.ExactArgs(1),
		RunE: open.run(func(ctx context.Context, a *audit.Auditor, args []string) error {
			r, err := a.Shards(ctx, args[0], limit)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(r)
			}
			if t := r.Task; t != nil {
				fmt.Fprintf(g.stdout, "Task %s  type %s  state %s\n", t.ID, t.Type, t.State)
				if t.Reason != "" {
					fmt.Fprintf(g.stdout, "Reason: %s\n", t.Reason)
				}
			} else {
				fmt.Fprintf(g.stdout, "Task %s (its row was removed by retention)\n", r.Parent)
			}
			if r.Total == 0 {
				fmt.Fprintln(g.stdout, "No shards mirrored: not a sharded task, its planner has not run yet, or the mirror is behind.")
				return nil
			}
			fmt.Fprintf(g.stdout, "Shards: %s\n", auditShardStates(r.States))
			if len(r.Failed) == 0 {
				return nil
			}
			if n := r.FailedTotal(); n > len(r.Failed) {
				fmt.Fprintf(g.stdout, "\nNot succeeded (first %d of %d):\n", len(r.Failed), n)
			} else {
				fmt.Fprintln(g.stdout, "\nNot succeeded:")
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SHARD\tID\tSTATE\tATTEMPT\tFINISHED (UTC)\tERROR")
			for _, s := range r.Failed {
				fin := "-"
				if s.FinishedAt != nil {
					fin = s.FinishedAt.Format(auditTimeLayout)
				}
				why := s.LastError
				if why == "" || s.State != "failed" {
					why = s.Reason
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\n", s.Index, s.ID, s.State, s.Attempt, fin, auditOneLine(auditDash(why)))
			}
			return w.Flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", audit.DefaultShardLimit, "largest number of shards listed")
	return cmd
}

// auditShardStates renders shard counts as "10 in all: 8 succeeded, 2
// failed", states in lifecycle order.
func auditShardStates(states map[string]int) string {
	var total int
	var parts []string
	seen := map[string]bool{}
	for _, st := range task.States() {
		seen[string(st)] = true
		if n := states[string(st)]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	var other []string
	for st, n := range states {
		if !seen[st] && n > 0 {
			total += n
			other = append(other, fmt.Sprintf("%d %s", n, st))
		}
	}
	sort.Strings(other)
	return fmt.Sprintf("%d in all: %s", total, strings.Join(append(parts, other...), ", "))
}

func auditFailuresCmd(g *globals, open auditOpener) *cobra.Command {
	var q audit.FailureQuery
	var since, until time.Duration
	cmd := &cobra.Command{
		Use:     "failures",
		Short:   "Failed attempts in a time range, grouped by type and error",
		Example: "  ax audit failures --since 1h --type report.build",
		Args:    cobra.NoArgs,
		RunE: open.run(func(ctx context.Context, a *audit.Auditor, _ []string) error {
			now := time.Now()
			q.Since = now.Add(-since)
			if until > 0 {
				q.Until = now.Add(-until)
			}
			gs, err := a.Failures(ctx, q)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(gs)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TYPE\tFAILURES\tTASKS\tFIRST\tLAST\tSAMPLE TASK\tERROR")
			for _, f := range gs {
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", f.Type, f.Failures, f.Tasks, f.First.Format(auditTimeLayout), f.Last.Format(auditTimeLayout), f.SampleTaskID, auditOneLine(f.Error))
			}
			return w.Flush()
		}),
	}
	fl := cmd.Flags()
	fl.DurationVar(&since, "since", time.Hour, "look back this far")
	fl.DurationVar(&until, "until", 0, "ignore failures more recent than this long ago")
	fl.StringVar(&q.Type, "type", "", "only this task type")
	fl.IntVar(&q.Limit, "limit", 50, "largest number of groups shown")
	return cmd
}

func auditStuckCmd(g *globals, open auditOpener) *cobra.Command {
	var q audit.StuckQuery
	cmd := &cobra.Command{
		Use:     "stuck",
		Short:   "Tasks in one state (default: any unfinished state) for longer than a duration",
		Example: "  ax audit stuck --state ready --older-than 10m",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if q.State != "" && !auditActiveState(q.State) {
				return fmt.Errorf("--state %q: want one of %s", q.State, strings.Join(audit.ActiveStates, ", "))
			}
			a, done, err := open(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			ts, err := a.Stuck(cmd.Context(), q)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(ts)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTYPE\tSTATE\tSINCE\tFOR\tATTEMPT\tEXECUTOR\tREASON")
			for _, s := range ts {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Type, s.State, s.Since.Format(auditTimeLayout),
					s.For.Round(time.Second), s.Attempt, auditDash(s.Executor), auditOneLine(s.Reason))
			}
			return w.Flush()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&q.State, "state", "", "state: "+strings.Join(audit.ActiveStates, ", ")+" (default: all of them)")
	fl.DurationVar(&q.OlderThan, "older-than", 10*time.Minute, "in that state for longer than this")
	fl.StringVar(&q.Type, "type", "", "only this task type")
	fl.IntVar(&q.Limit, "limit", 100, "largest number of tasks shown")
	return cmd
}

func auditActiveState(s string) bool {
	for _, v := range audit.ActiveStates {
		if v == s {
			return true
		}
	}
	return false
}

func auditRetriesCmd(g *globals, open auditOpener) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "retries",
		Short: "Retry and dead-letter counts per task type",
		Args:  cobra.NoArgs,
		RunE: open.run(func(ctx context.Context, a *audit.Auditor, _ []string) error {
			var from time.Time
			if since > 0 {
				from = time.Now().Add(-since)
			}
			rs, err := a.Retries(ctx, from)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(rs)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TYPE\tTASKS\tATTEMPTS\tRETRIES\tFAILED ATTEMPTS\tDEAD-LETTERED\tIN DLQ\tREDRIVES")
			for _, r := range rs {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Type, r.Tasks, r.Attempts, r.Retries, r.FailedAttempts, r.DeadLettered, r.InDLQ, r.Redrives)
			}
			return w.Flush()
		}),
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only attempts and dead letters this recent (default: everything mirrored)")
	return cmd
}

func auditRebuildCmd(g *globals, dsn *string) *cobra.Command {
	var opts mirror.RebuildOptions
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Replay the whole AX_TASKS history into an empty audit database",
		Long: `Replay every task event still in AX_TASKS, from the first, into an empty
database (create one first). The result equals what a live mirror writes.
The running mirrors and their consumer are not touched.`,
		Example: "  ax audit rebuild --mysql-dsn 'ax:secret@tcp(127.0.0.1:3306)/ax_rebuilt'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger()
			opts.Logger = &log
			db, err := mirror.Open(mysqlDSNOrEnv(*dsn), &log)
			if err != nil {
				return err
			}
			defer db.Close()
			nc, err := g.connect("ax-audit-rebuild")
			if err != nil {
				return err
			}
			defer nc.Close()
			res, err := mirror.Rebuild(cmd.Context(), nc, db, opts)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(res)
			}
			fmt.Fprintf(g.stdout, "rebuilt %d events (up to sequence %d) in %s\n", res.Events, res.LastSeq, res.Duration.Round(time.Millisecond))
			return nil
		},
	}
	cmd.Flags().IntVar(&opts.Batch, "batch", mirror.DefaultBatch, "events written per transaction")
	cmd.Flags().BoolVar(&opts.AllowNonEmpty, "allow-non-empty", false, "write into a database that already has rows (e.g. finish an interrupted rebuild)")
	return cmd
}

const auditTimeLayout = "2006-01-02 15:04:05.000"

func auditDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line.
func auditOneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}
