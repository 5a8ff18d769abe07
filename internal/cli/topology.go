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

// readyFlags are the options of AX_READY's storage (orchestrator and
// topology).
func readyFlags(f *pflag.FlagSet, inMemory *bool, maxBytes, perLevel *int64) {
	f.BoolVar(inMemory, "ready-in-memory", false, "keep AX_READY, the dispatches, in memory: one fsync less per task; a server restart empties it and the reconciler dispatches again (applies when AX_READY is created; see deploy/README.md)")
	f.Int64Var(maxBytes, "ready-max-bytes", topology.DefaultReadyMaxBytes, "with --ready-in-memory: AX_READY's memory bound (the server's max_memory_store must allow it)")
	f.Int64Var(perLevel, "ready-max-per-level", topology.DefaultReadyMaxPerLevel, "with --ready-in-memory: dispatches stored per capability and priority; tasks beyond wait, held, until there is room")
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
to N replicas (0 keeps what they have). --ready-in-memory creates AX_READY
in memory (an existing one keeps its storage: see deploy/README.md).
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
	readyFlags(cmd.Flags(), &opts.ReadyInMemory, &opts.ReadyMaxBytes, &opts.ReadyMaxPerLevel)
	groupCommitFlag(cmd.Flags(), &opts.GroupCommit)
	return cmd
}
