package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ax-run/ax/internal/groupcommit"
	"github.com/ax-run/ax/internal/topology"
)

// readyFlags accepts the options of AX_READY's storage that earlier
// versions had (orchestrator and topology), so their units still start:
// dispatches are task records now (no AX_READY), and the flags do
// nothing but say so.
func readyFlags(f *pflag.FlagSet) {
	const gone = "dispatches are task records in AX_TASKS now: there is no AX_READY to keep in memory (deploy/README.md, Upgrading)"
	f.Bool("ready-in-memory", false, "")
	f.Int64("ready-max-bytes", 0, "")
	f.Int64("ready-max-per-level", 0, "")
	for _, name := range []string{"ready-in-memory", "ready-max-bytes", "ready-max-per-level"} {
		_ = f.MarkDeprecated(name, gone)
	}
}

// groupCommitFlag binds --group-commit[=false] to *on, left nil (keep what
// AX_TASKS records) unless the flag is given (orchestrator and topology).
func groupCommitFlag(f *pflag.FlagSet, on **bool) {
	f.Var(optionalBool{on}, "group-commit", "turn group commit on (=false: off) for the whole deployment, recorded on AX_TASKS: record writes and large SubmitMany calls that queue up go as atomic batches, each one fsync on a single-node server with sync_interval: always (NATS ≥ 2.15; slower on other servers; default: keep what is recorded, off at first)")
	f.Lookup("group-commit").NoOptDefVal = "true"
}

// optionalBool is a bool flag whose absence is nil.
type optionalBool struct{ p **bool }

func (b optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = &v
	return nil
}

func (b optionalBool) String() string {
	if b.p == nil || *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}

func (optionalBool) Type() string { return "bool" }

// topologyCmd is the explicit way to change AX's streams: their replica
// count is never lowered by a process started with defaults.
func topologyCmd(g *globals) *cobra.Command {
	var opts topology.Options
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Create or update AX's streams, buckets and object stores (e.g. --replicas 3 on a cluster)",
		Long: `Creates AX's streams, buckets and object stores, or updates them to this
version's configuration, as an orchestrator does at start. Unlike an
orchestrator, it may lower the replica count: --replicas N sets every stream
to N replicas (0 keeps what they have).
--group-commit[=false] turns group commit on or off for every orchestrator
and client that starts afterwards (deploy/README.md, "Durability").`,
		Args: cobra.NoArgs,
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, _ []string) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			opts.AllowFewerReplicas = true
			if err := topology.Ensure(ctx, js, opts); err != nil {
				return err
			}
			type streamJSON struct {
				Name        string `json:"name"`
				Replicas    int    `json:"replicas"`
				Storage     string `json:"storage"`
				GroupCommit bool   `json:"group_commit"`
			}
			out := []streamJSON{}
			for _, cfg := range topology.Streams(topology.Options{}) {
				s, err := js.Stream(ctx, cfg.Name)
				if err != nil {
					return fmt.Errorf("stream %s: %w", cfg.Name, err)
				}
				have := s.CachedInfo().Config
				out = append(out, streamJSON{Name: cfg.Name, Replicas: have.Replicas, Storage: have.Storage.String(), GroupCommit: groupcommit.Enabled(have)})
			}
			if g.jsonOutput() {
				return g.printJSON(out)
			}
			for _, s := range out {
				extra := ""
				if s.GroupCommit {
					extra = ", group commit"
				}
				fmt.Fprintf(g.stdout, "%-14s replicas %d, %s%s\n", s.Name, s.Replicas, s.Storage, extra)
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&opts.Replicas, "replicas", 0, "replicas of every stream (0: keep the current count)")
	cmd.Flags().DurationVar(&opts.DLQMaxAge, "dlq-max-age", 0, "keep dead letters this long in AX_DLQ (0: keep the stream's setting; negative: for ever)")
	readyFlags(cmd.Flags())
	groupCommitFlag(cmd.Flags(), &opts.GroupCommit)
	return cmd
}
