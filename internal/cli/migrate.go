package cli

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/upgrade"
)

func migrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Move what an earlier version of AX stored into this version's form",
	}
	var opts upgrade.Options
	tasks := &cobra.Command{
		Use:   "tasks",
		Short: "Move task histories of the earlier layout (ax.task.<id>) onto this version's (ax.task.<id>.e, dispatches on ax.task.<id>.d.…)",
		Long: `Moves every task history an earlier version wrote (one subject per task,
ax.task.<id>) onto this version's layout: each task's state is written as a
"migrated" event on its new subjects, its earlier events stay readable where
they are. A ready task is written as its dispatch (under its execution id:
a report of it still applies), a running task as a new dispatch (its executor,
of the earlier version, is stopped). Then AX_READY (the earlier dispatches)
is removed, and AX_TASKS records the new layout: orchestrators of this
version refuse to start until then.

Stop every orchestrator and executor of the earlier version first (it
refuses while their consumers have pull requests waiting, unless --force),
and run it with the orchestrator's NATS rights (dispatches are signed with
the orchestrators' key). Run again, it skips what it moved. See
deploy/README.md, Upgrading.`,
		Args: cobra.NoArgs,
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, _ []string) error {
			opts.Progress = func(done, total int) {
				if !g.jsonOutput() {
					fmt.Fprintf(g.stderr, "%d of %d tasks\n", done, total)
				}
			}
			rep, err := upgrade.Tasks(ctx, js, opts)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(map[string]any{"tasks": rep.Tasks, "moved": rep.Moved, "dispatched": rep.Dispatched, "ready_stream_removed": rep.ReadyStreamRemoved})
			}
			fmt.Fprintf(g.stdout, "%d legacy task histories: %d moved (%d of them dispatched), %d moved already", rep.Tasks, rep.Moved, rep.Dispatched, rep.Tasks-rep.Moved)
			if rep.ReadyStreamRemoved {
				fmt.Fprint(g.stdout, "; AX_READY removed")
			}
			fmt.Fprintln(g.stdout)
			return nil
		}),
	}
	tasks.Flags().BoolVar(&opts.Force, "force", false, "run although consumers of the earlier version have pull requests waiting (its processes may still run)")
	cmd.AddCommand(tasks)
	return cmd
}
