package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/object"
	"github.com/ax-run/ax/internal/subject"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

func submitCmd(g *globals) *cobra.Command {
	var (
		spec      task.Spec
		payload   string
		dependsOn []string
		timeout   time.Duration
		file      string
		wait      bool
		keyFile   string
	)
	cmd := &cobra.Command{
		Use:   "submit [TYPE]",
		Short: "Submit a task (flags), or a spec or graph from a JSON file (-f)",
		Example: `  ax submit report.build --payload '{"day":"2026-11-29"}' --priority 1
  ax submit demo.split --shardable --max-parallel-shards 10 --payload '{"shards":100,"size":1000}' --wait
  ax submit -f graph.json        # {"tasks":[{...},{...}]}`,
		Args: cobra.MaximumNArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			var ids []string
			var err error
			if c.Codec, err = loadCodec(keyFile); err != nil {
				return err
			}
			if file != "" {
				ids, err = submitFile(ctx, c, file)
			} else {
				if len(args) != 1 {
					return usageError(errors.New("give a task TYPE or -f FILE"))
				}
				spec.Type = args[0]
				if payload != "" {
					spec.Payload = json.RawMessage(payload)
				}
				spec.DependsOn = dependsOn
				spec.Timeout = task.Duration(timeout)
				var id string
				id, err = c.Submit(ctx, spec)
				ids = []string{id}
			}
			if err != nil {
				return err
			}
			if !wait {
				if g.jsonOutput() {
					return g.printJSON(submitJSON{IDs: ids})
				}
				for _, id := range ids {
					fmt.Fprintln(g.stdout, id)
				}
				return nil
			}
			out := submitJSON{IDs: ids, Tasks: make([]*task.Task, 0, len(ids))}
			for _, id := range ids {
				t, err := c.Wait(ctx, id)
				if err != nil {
					return err
				}
				if g.jsonOutput() {
					out.Tasks = append(out.Tasks, t)
					continue
				}
				fmt.Fprintf(g.stdout, "%s\t%s\n", id, t.State)
			}
			if g.jsonOutput() {
				return g.printJSON(out)
			}
			return nil
		}),
	}
	spec.Priority, spec.MaxRetries = new(task.DefaultPriority), new(task.DefaultMaxRetries)
	f := cmd.Flags()
	f.StringVar(&spec.ID, "id", "", "task id (default: a new sortable unique id)")
	f.StringVar(&payload, "payload", "", "payload as JSON")
	f.IntVar(spec.Priority, "priority", task.DefaultPriority, "priority 0 (highest) … 5 (lowest)")
	f.StringVar(&spec.Capability, "capability", task.DefaultCapability, "capability the executor must have")
	f.StringSliceVar(&dependsOn, "depends-on", nil, "ids of tasks that must succeed first (or end: see --trigger-rule)")
	f.StringVar(&spec.UniqueKey, "unique-key", "", "one task of this type per key within --unique-window (a later one is recorded as a duplicate)")
	f.DurationVar((*time.Duration)(&spec.UniqueWindow), "unique-window", 0, "with --unique-key: how long the key holds (e.g. 1h)")
	f.StringVar((*string)(&spec.TriggerRule), "trigger-rule", "", "with --depends-on: all_succeeded (default), all_ended or any_failed")
	f.IntVar(spec.MaxRetries, "max-retries", task.DefaultMaxRetries, "retries after a failed first attempt")
	f.DurationVar(&timeout, "timeout", task.DefaultTimeout, "execution timeout of one attempt")
	f.DurationVar((*time.Duration)(&spec.Delay), "delay", 0, "keep the task waiting this long before it may run")
	f.Float64Var(&spec.EstimatedCost, "cost", task.DefaultEstimatedCost, "estimated cost against executor capacity")
	f.StringVarP(&file, "file", "f", "", "JSON file with one spec, or a graph {\"tasks\":[…]}")
	f.BoolVar(&wait, "wait", false, "wait until the task ends and print its state")
	f.BoolVar(&spec.Shardable, "shardable", false, "run the type's planner first and its shards as child tasks")
	f.IntVar(&spec.MaxParallelShards, "max-parallel-shards", 0, "shardable: at most this many shards released at once (0: no limit)")
	f.Float64Var(&spec.MinShardSuccess, "min-shard-success", 0, "shardable: 0 fails at the first failed shard; a fraction aggregates when that share succeeded")
	f.StringVar(&spec.FairnessKey, "fairness-key", "", "a tenant or customer: while its level is busy, tasks of different fairness keys are dispatched in turn")
	f.StringVar(&spec.ConcurrencyKey, "concurrency-key", "", "the key the key limits apply to (ax limits): concurrency, rate, adaptive")
	addCodecFlag(f, &keyFile)
	return cmd
}

// submitJSON is what ax submit prints with -o json: the ids submitted
// and, with --wait, each task as it ended.
type submitJSON struct {
	IDs   []string     `json:"ids"`
	Tasks []*task.Task `json:"tasks,omitempty"`
}

func submitFile(ctx context.Context, c *sdk.Client, file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, usageError(err)
	}
	if strings.Contains(string(data), `"tasks"`) {
		g, err := task.DecodeGraph(data)
		if err != nil {
			return nil, usageError(err)
		}
		return c.SubmitGraph(ctx, g.Tasks)
	}
	s, err := task.DecodeSpec(data)
	if err != nil {
		return nil, usageError(err)
	}
	id, err := c.Submit(ctx, s)
	return []string{id}, err
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status [ID]",
		Short: "Show a task's state and full history (or why it was rejected); without ID: pauses, breakers, backlogs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return overview(cmd, g)
			}
			ctx := cmd.Context()
			c, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			t, err := c.Get(ctx, args[0])
			var rej *sdk.RejectedError
			if errors.As(err, &rej) {
				if g.jsonOutput() {
					return g.printJSON(map[string]any{"rejected": rej.Rejection})
				}
				fmt.Fprintf(g.stdout, "Task %s was rejected at %s\nReason:  %s\nSubject: %s\nInput:   %s\n",
					args[0], rej.Rejection.RejectedAt.Format(time.RFC3339), rej.Rejection.Reason, rej.Rejection.Subject, rej.Rejection.Input)
				return nil
			}
			if err != nil {
				return err
			}
			h, err := c.History(ctx, args[0])
			if err != nil {
				return err
			}
			var shards *sdk.ShardProgress
			if t.Shardable {
				if shards, err = c.Shards(ctx, args[0]); err != nil {
					return err
				}
			}
			// An upstream forgotten after its retention leaves the
			// inputs unreadable, not the status.
			var ins []task.Input
			var insErr error
			if len(t.DependsOn) > 0 {
				ins, insErr = c.Inputs(ctx, args[0])
			}
			// Where its handler runs now and its progress, from the
			// workers registry: the record says running only once the
			// attempt outlived a heartbeat.
			live, unserved := runningNow(ctx, c, t)
			if g.jsonOutput() {
				out := map[string]any{"task": t, "history": h}
				if live != nil {
					out["running_now"] = live
				}
				if unserved != "" {
					out["unserved"] = unserved
				}
				if shards != nil {
					out["shards"] = shards
				}
				if ins != nil {
					out["inputs"] = ins
				}
				if insErr != nil {
					out["inputs_error"] = insErr.Error()
				}
				return g.printJSON(out)
			}
			printTask(g, t)
			printRunningNow(g, t, live, unserved)
			if shards != nil {
				printShards(g, shards)
			}
			printInputs(g, ins, insErr)
			printSteps(g, t)
			fmt.Fprintln(g.stdout, "\nHistory:")
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REV\tAT\tFROM\tTO\tACTOR\tREASON")
			for _, ev := range h {
				from := string(ev.Event.From)
				if from == "" {
					from = "-"
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", ev.Revision, ev.Event.At.Format("15:04:05.000"), from, ev.Event.To, ev.Event.Actor, ev.Event.Reason)
			}
			return w.Flush()
		},
	}
}

func printTask(g *globals, t *task.Task) {
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s\t%s\n", k, v)
		}
	}
	ts := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return p.Format(time.RFC3339Nano)
	}
	row("ID", t.ID)
	row("Type", t.Type)
	row("State", string(t.State))
	row("Reason", t.Reason)
	row("Priority", fmt.Sprintf("p%d", t.PriorityLevel()))
	row("Capability", t.Capability)
	if t.WaitFor == nil { // an event task runs no attempt
		row("Attempt", fmt.Sprintf("%d of %d", t.Attempt, t.RetryLimit()+1))
	}
	row("Execution", t.ExecutionID)
	row("Executor", t.Executor)
	if t.IsShard() {
		row("Shard of", fmt.Sprintf("%s (#%d)", t.Parent, t.ShardIndex))
	}
	if t.Parked {
		row("Parked", "waits for a free slot under its parent's max_parallel_shards")
	}
	row("Depends on", strings.Join(t.DependsOn, ", "))
	if t.UniqueKey != "" {
		row("Unique key", fmt.Sprintf("%q for %s", t.UniqueKey, t.UniqueWindow.Std()))
	}
	row("Duplicate of", t.DuplicateOf)
	if t.TriggerRule != "" {
		row("Trigger rule", string(t.TriggerRule))
	}
	row("Dependents", strings.Join(t.Dependents, ", "))
	for _, kv := range eventRows(t) {
		row(kv[0], kv[1])
	}
	row("Submitted", t.SubmittedAt.Format(time.RFC3339Nano))
	row("Ready", ts(t.ReadyAt))
	row("Started", ts(t.StartedAt))
	row("Finished", ts(t.FinishedAt))
	row("Retry at", ts(t.RetryAt))
	if len(t.Result) > 0 {
		row("Result", string(t.Result))
	}
	if t.ResultObject != "" {
		row("Result object", t.ResultObject+" in "+object.Bucket(t.ResultBucket))
	}
	for _, e := range t.Errors {
		row(fmt.Sprintf("Error #%d", e.Attempt), e.Error)
	}
	_ = w.Flush()
}

// eventRows are what ax status shows of an event task's wait: the event
// it waits for, since when and until when, and how it ended (the event's
// sequence, its data being the result; or who approved or rejected it).
//
// A task with a cancel_on shows the event that cancels it, and after which
// AX_EVENTS sequence such an event counts.
func eventRows(t *task.Task) [][2]string {
	var out [][2]string
	if c := t.CancelOn; c != nil {
		out = append(out, [2]string{"Cancelled by", fmt.Sprintf("event %s stored after AX_EVENTS sequence %d (subject %s, match %s)",
			subject.Event(c.EventSubject()), t.CancelOnAfter, c.Subject, c.Match)})
	}
	w := t.WaitFor
	if w == nil {
		return out
	}
	out = append(out, [2]string{"Waits for", fmt.Sprintf("event %s (subject %s, match %s, timeout %s)", subject.Event(w.EventSubject()), w.Subject, w.Match, w.Timeout.Std())})
	switch {
	case t.EventWaitSince != nil:
		out = append(out, [2]string{"Waiting since", t.EventWaitSince.Format(time.RFC3339Nano)})
	case !t.State.Terminal():
		out = append(out, [2]string{"Waiting since", "not yet: its dependencies or start time hold it"})
	}
	if t.ExpiresAt != nil && !t.State.Terminal() {
		out = append(out, [2]string{"Timeout at", t.ExpiresAt.Format(time.RFC3339Nano)})
	}
	if t.EventSeq != 0 {
		at := ""
		if t.FinishedAt != nil {
			at = " at " + t.FinishedAt.Format(time.RFC3339Nano)
		}
		out = append(out, [2]string{"Event", fmt.Sprintf("arrived%s: AX_EVENTS sequence %d, its data the result", at, t.EventSeq)})
	}
	if a := t.Approval; a != nil {
		k := "Approved by"
		if !a.Approved {
			k = "Rejected by"
		}
		v := a.By
		if v == "" {
			v = "(unnamed)"
		}
		v += " at " + a.At.Format(time.RFC3339Nano)
		if a.Reason != "" {
			v += ": " + a.Reason
		}
		out = append(out, [2]string{k, v})
	}
	return out
}

// inputResultWidth bounds an inline result shown in ax status's inputs.
const inputResultWidth = 80

// printInputs shows how each upstream of a task ended and its result.
func printInputs(g *globals, ins []task.Input, err error) {
	if err != nil {
		fmt.Fprintf(g.stdout, "\nInputs: not readable: %v\n", err)
		return
	}
	if len(ins) == 0 {
		return
	}
	fmt.Fprintln(g.stdout, "\nInputs:")
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  UPSTREAM\tSTATE\tRESULT\tREASON")
	for _, in := range ins {
		res := string(in.Result)
		if len(res) > inputResultWidth {
			cut := inputResultWidth
			for cut > 0 && !utf8.RuneStart(res[cut]) {
				cut--
			}
			res = res[:cut] + fmt.Sprintf("… (%d bytes)", len(in.Result))
		}
		if in.ResultObject != "" {
			res = "object " + in.ResultObject + " in " + object.Bucket(in.ResultBucket)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", in.ID, in.State, res, in.Reason)
	}
	_ = w.Flush()
}

// printSteps lists a task's durable steps and sleeps (executor.Job.Step,
// Job.Sleep) in the order they were stored.
func printSteps(g *globals, t *task.Task) {
	if len(t.Steps) == 0 {
		return
	}
	fmt.Fprintf(g.stdout, "\nSteps (%d of at most %d):\n", len(t.Steps), task.MaxSteps)
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  STEP\tATTEMPT\tSTORED\tEXECUTOR\tRESULT")
	for _, st := range t.Steps {
		res := string(st.Result)
		if len(res) > inputResultWidth {
			cut := inputResultWidth
			for cut > 0 && !utf8.RuneStart(res[cut]) {
				cut--
			}
			res = res[:cut] + fmt.Sprintf("… (%d bytes)", len(st.Result))
		}
		switch {
		case st.IsSleep() && st.SleepUntil != nil:
			res = "sleep until " + st.SleepUntil.Format(time.RFC3339Nano)
		case st.ResultObject != "":
			res = "object " + st.ResultObject + " in " + object.Bucket(st.ResultBucket)
		}
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\n", st.Name, st.Attempt, st.At.Format(time.RFC3339Nano), st.Executor, res)
	}
	_ = w.Flush()
}

// printShards shows a sharded task's phase and shard counts per state.
func printShards(g *globals, p *sdk.ShardProgress) {
	fmt.Fprintf(g.stdout, "\nShards: phase %s, %d planned", p.Phase, p.Total)
	if p.Total > 0 && !p.Registered && p.Phase == task.PhaseShards {
		fmt.Fprint(g.stdout, " (registering)")
	}
	fmt.Fprintln(g.stdout)
	if p.Total == 0 {
		return
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "  unfinished\t%d\n", p.Unfinished)
	for _, st := range []task.State{task.Succeeded, task.Failed, task.Cancelled, task.Expired} {
		if n := p.Ended[st]; n > 0 {
			fmt.Fprintf(w, "  %s\t%d\n", st, n)
		}
	}
	_ = w.Flush()
}

func cancelCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task (a running handler has its context cancelled)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			t, err := c.Cancel(ctx, args[0], reason)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(t)
			}
			fmt.Fprintf(g.stdout, "%s\t%s\n", t.ID, t.State)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "reason recorded in the audit trail")
	return cmd
}

// approveCmd is `ax approve`: an operator's approval or rejection of an
// event task waiting for its event (sdk.Client.Approve).
func approveCmd(g *globals) *cobra.Command {
	var opts sdk.ApproveOptions
	cmd := &cobra.Command{
		Use:   "approve ID",
		Short: "Approve (or --reject) an event task waiting for its event: it succeeds with the approval as its result, or fails for good",
		Long: `Decides an event task (a spec with wait_for) that waits for its event,
in place of the event. Approved, it succeeds with the result
{"approved": true, "by", "reason", "at"}, which its dependents read as
their input. Rejected, it fails for good (no retry) with the error
"rejected by <who>: <reason>": its all_succeeded dependents are cancelled
and its any_failed ones run. Who decided is --as (vouched for by the
server under per-user permissions) and --by.

A task that is not an event task, does not wait for its event yet, or has
ended is refused: the command exits non-zero saying which.`,
		Example: `  ax approve refund-42 --reason "receipt checked"
  ax approve refund-43 --reject --reason "no receipt"`,
		Args: cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			t, err := c.Approve(ctx, args[0], opts)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(t)
			}
			fmt.Fprintf(g.stdout, "%s\t%s\t%s\n", t.ID, t.State, t.Reason)
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Reject, "reject", false, "reject: the task fails for good")
	f.StringVar(&opts.Reason, "reason", "", "reason recorded with the decision")
	f.StringVar(&opts.By, "by", os.Getenv("USER"), "who decides, recorded with the decision (after --as)")
	return cmd
}

func dlqCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "List, re-drive and discard dead-lettered tasks"}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the dead-letter queue",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			dls, err := c.DeadLetters(ctx)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				out := make([]deadLetterJSON, len(dls))
				for i, d := range dls {
					out[i] = deadLetterJSON{DeadLetter: d, LastAttempt: d.LastAttempt()}
				}
				return g.printJSON(out)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTYPE\tFAILED AT\tATTEMPTS\tREASON")
			for _, d := range dls {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", d.Spec.ID, d.Spec.Type, d.FailedAt.Format(time.RFC3339), d.LastAttempt(), d.Reason)
			}
			return w.Flush()
		}),
	})
	cmd.AddCommand(redriveCmd(g), dlqRmCmd(g))
	return cmd
}

// redriveCmd is `ax dlq redrive` (also `ax redrive`).
func redriveCmd(g *globals) *cobra.Command {
	var withDependents bool
	var reason, by string
	cmd := &cobra.Command{
		Use:   "redrive ID",
		Short: "Start a fresh attempt series for a dead-lettered task (--with-dependents re-opens what its failure cancelled)",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, args []string) error {
			opts := []sdk.RedriveOption{sdk.By(by)}
			if withDependents {
				opts = append(opts, sdk.WithDependents())
			}
			t, err := c.RedriveWithReason(ctx, args[0], reason, opts...)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(t)
			}
			fmt.Fprintf(g.stdout, "%s\t%s\texecution %s\n", t.ID, t.State, t.ExecutionID)
			return nil
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&withDependents, "with-dependents", false, "re-open, under the same ids, the dependents its failure cancelled (and theirs)")
	f.StringVar(&reason, "reason", "", "reason recorded in the task's history")
	f.StringVar(&by, "by", os.Getenv("USER"), "who asks, recorded in the histories the re-drive writes")
	return cmd
}

func rejectedCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "rejected",
		Short: "List recently rejected submissions and why",
		Args:  cobra.NoArgs,
		RunE: g.withClient(func(ctx context.Context, c *sdk.Client, _ []string) error {
			rs, err := c.Rejections(ctx, limit)
			if err != nil {
				return err
			}
			if g.jsonOutput() {
				return g.printJSON(rs)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "AT\tID\tSUBJECT\tREASON")
			for _, r := range rs {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.RejectedAt.Format(time.RFC3339), r.ID, r.Subject, r.Reason)
			}
			return w.Flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "how many of the newest rejections to show")
	return cmd
}

// deadLetterJSON is a dead letter in `ax dlq list -o json`: the entry as
// stored, whose "attempts" are the failures its record kept (the last 5),
// and "last_attempt", how many attempts its last series ran.
type deadLetterJSON struct {
	task.DeadLetter
	LastAttempt int `json:"last_attempt"`
}
