package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/audit"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func tasksCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "List tasks (ax tasks ls)"}
	var (
		f     sdk.ListFilter
		state string
		since string
		dsn   string
	)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List tasks by state, type, capability and last change, newest first, a page at a time",
		Long: `Lists tasks, the most recently changed first, a page at a time (--limit, and
--cursor with the "next" cursor the previous page printed). Without the MySQL
mirror it reads JetStream: the current record of every task, or with --since
the events since then (fine for thousands of tasks); with --mysql-dsn (or
AX_MYSQL_DSN) the mirror answers from its indexes, whatever the number of
tasks. --since takes a duration back from now (1h) or an RFC 3339 time.`,
		Example: `  ax tasks ls --state failed --since 24h
  ax tasks ls --type email.send --capability default --limit 20 -o json
  ax tasks ls --state ready --cursor js:1234`,
		Args: cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			f.State = task.State(state)
			if f.State != "" && !f.State.Valid() {
				return usageError(fmt.Errorf("--state %q: want one of %v", state, task.States()))
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return usageError(err)
				}
				f.Since = t
			}
			var page tasksPage
			var err error
			if dsn := mysqlDSNOrEnv(dsn); dsn != "" {
				page, err = listFromMirror(ctx, dsn, f)
			} else {
				page, err = listFromJetStream(ctx, c, f)
			}
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(page)
			}
			printTasksPage(g, page)
			return nil
		}),
	}
	fl := ls.Flags()
	fl.StringVar(&state, "state", "", "only tasks in this state (waiting, ready, running, retrying, succeeded, failed, cancelled, expired)")
	fl.StringVar(&f.Type, "type", "", "only tasks of this type")
	fl.StringVar(&f.Capability, "capability", "", "only tasks of this capability")
	fl.StringVar(&since, "since", "", "only tasks changed since: a duration back from now (1h) or an RFC 3339 time")
	fl.IntVar(&f.Limit, "limit", 50, "tasks per page (at most 500 from the mirror, 1000 from JetStream)")
	fl.StringVar(&f.Cursor, "cursor", "", "continue after a page: its next cursor")
	fl.StringVar(&dsn, "mysql-dsn", "", "list from the MySQL mirror (default: env "+envMySQLDSN+"; without one, from JetStream)")
	cmd.AddCommand(ls)
	return cmd
}

// parseSince reads --since: a duration back from now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (1h) or an RFC 3339 time", s)
}

// tasksPage is what ax tasks ls prints: one page, its next cursor ("" on
// the last page) and where it was read.
type tasksPage struct {
	Tasks []taskRow `json:"tasks"`
	Next  string    `json:"next,omitempty"`
	// Source is "jetstream" or "mysql".
	Source string `json:"source"`
}

// taskRow is a listed task, the same whichever source answered.
type taskRow struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	State       string    `json:"state"`
	Priority    int       `json:"priority"`
	Capability  string    `json:"capability"`
	Attempt     int       `json:"attempt"`
	Executor    string    `json:"executor,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	SubmittedAt time.Time `json:"submitted_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func listFromJetStream(ctx context.Context, c *sdk.Client, f sdk.ListFilter) (tasksPage, error) {
	p, err := c.List(ctx, f)
	if err != nil {
		return tasksPage{}, err
	}
	out := tasksPage{Tasks: make([]taskRow, len(p.Tasks)), Next: p.Next, Source: "jetstream"}
	for i, t := range p.Tasks {
		out.Tasks[i] = taskRow{ID: t.ID, Type: t.Type, State: string(t.State), Priority: t.PriorityLevel(), Capability: t.Capability,
			Attempt: t.Attempt, Executor: t.Executor, Reason: t.Reason, SubmittedAt: t.SubmittedAt, UpdatedAt: t.UpdatedAt}
	}
	return out, nil
}

// mirrorCursorPrefix starts a mirror listing's cursor ("my:<offset>").
const mirrorCursorPrefix = "my:"

func listFromMirror(ctx context.Context, dsn string, f sdk.ListFilter) (tasksPage, error) {
	offset := 0
	if f.Cursor != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(f.Cursor, mirrorCursorPrefix))
		if err != nil || !strings.HasPrefix(f.Cursor, mirrorCursorPrefix) || n < 0 {
			return tasksPage{}, usageError(fmt.Errorf("--cursor %q is not a cursor of the mirror's pages", f.Cursor))
		}
		offset = n
	}
	db, err := openAuditDB(ctx, dsn)
	if err != nil {
		return tasksPage{}, err
	}
	defer db.Close()
	limit := f.Limit
	if limit <= 0 {
		limit = sdk.DefaultListLimit
	}
	if limit > audit.MaxSearchLimit || offset > audit.MaxSearchOffset {
		return tasksPage{}, usageError(fmt.Errorf("the mirror pages at most %d tasks, %d deep (narrow the listing)", audit.MaxSearchLimit, audit.MaxSearchOffset))
	}
	r, err := audit.New(db, time.Now).Search(ctx, audit.SearchQuery{State: string(f.State), Type: f.Type, Capability: f.Capability,
		Priority: -1, Since: f.Since, Sort: audit.SortUpdated, Offset: offset, Limit: limit})
	if err != nil {
		return tasksPage{}, err
	}
	out := tasksPage{Tasks: make([]taskRow, len(r.Tasks)), Source: "mysql"}
	for i, t := range r.Tasks {
		out.Tasks[i] = taskRow{ID: t.ID, Type: t.Type, State: t.State, Priority: t.Priority, Capability: t.Capability,
			Attempt: t.Attempt, Executor: t.Executor, Reason: t.Reason, SubmittedAt: t.SubmittedAt, UpdatedAt: t.UpdatedAt}
	}
	if r.More {
		out.Next = mirrorCursorPrefix + strconv.Itoa(offset+limit)
	}
	return out, nil
}

func printTasksPage(g *globals, p tasksPage) {
	if len(p.Tasks) == 0 {
		fmt.Fprintln(g.stdout, "No task matches.")
		return
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTYPE\tSTATE\tPRIORITY\tCAPABILITY\tATTEMPT\tUPDATED\tREASON")
	for _, t := range p.Tasks {
		reason := t.Reason
		if len(reason) > 80 {
			reason = reason[:80] + "…"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\tp%d\t%s\t%d\t%s\t%s\n", t.ID, t.Type, t.State, t.Priority, t.Capability, t.Attempt, t.UpdatedAt.UTC().Format(time.RFC3339), strings.ReplaceAll(reason, "\n", " "))
	}
	_ = w.Flush()
	if p.Next != "" {
		fmt.Fprintf(g.stdout, "\nMore: --cursor %s\n", p.Next)
	}
}
