package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/topology"
)

// topologyCmd is the explicit way to change AX's streams: their replica
// count is never lowered by a process started with defaults.
func topologyCmd(g *globals) *cobra.Command {
	var replicas int
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Create or update AX's streams, buckets and object stores (e.g. --replicas 3 on a cluster)",
		Long: `Creates AX's streams, buckets and object stores, or updates them to this
version's configuration, as an orchestrator does at start. Unlike an
orchestrator, it may lower the replica count: --replicas N sets every stream
to N replicas (0 keeps what they have).`,
		Args: cobra.NoArgs,
		RunE: g.withJetStream(func(ctx context.Context, js jetstream.JetStream, _ []string) error {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := topology.Ensure(ctx, js, topology.Options{Replicas: replicas, AllowFewerReplicas: true}); err != nil {
				return err
			}
			for _, cfg := range topology.Streams(topology.Options{}) {
				s, err := js.Stream(ctx, cfg.Name)
				if err != nil {
					return fmt.Errorf("stream %s: %w", cfg.Name, err)
				}
				fmt.Fprintf(g.stdout, "%-14s replicas %d\n", cfg.Name, s.CachedInfo().Config.Replicas)
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&replicas, "replicas", 0, "replicas of every stream (0: keep the current count)")
	return cmd
}
