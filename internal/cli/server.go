package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ax-run/ax/internal/natsserver"
)

func serverCmd(g *globals) *cobra.Command {
	var cfg natsserver.Config
	var healthAddr string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run an embedded NATS server with JetStream (for development and tests; see deploy/ for production)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.StoreDir == "" {
				return usageError(fmt.Errorf("--store is required"))
			}
			s, err := natsserver.Start(cfg)
			if err != nil {
				return err
			}
			log := g.logger()
			if err := serveServerHealth(cmd.Context(), healthAddr, s, log); err != nil {
				s.Stop()
				return err
			}
			log.Info().Str("url", s.URL()).Str("store", cfg.StoreDir).Bool("sync_always", cfg.SyncAlways).Msg("NATS server running; Ctrl-C to stop")
			if g.jsonOutput() {
				_ = g.printJSON(map[string]string{"url": s.URL(), "store": cfg.StoreDir})
			} else {
				fmt.Fprintln(g.stdout, s.URL())
			}
			<-cmd.Context().Done()
			s.Stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.StoreDir, "store", "", "JetStream store directory (required)")
	f.StringVar(&cfg.Host, "host", "127.0.0.1", "listen address")
	f.IntVar(&cfg.Port, "port", defaultNATSPort(), "listen port: the one every ax command and the SDK connect to by default (0 picks a free one; the URL is printed)")
	f.BoolVar(&cfg.SyncAlways, "sync-always", false, "fsync every write (see deploy/README.md)")
	f.StringVar(&healthAddr, "health-addr", "", "serve /healthz and /readyz on this address (e.g. :8222; default off)")
	return cmd
}
