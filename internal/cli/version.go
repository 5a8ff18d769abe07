package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
)

// Stamped at build time by scripts/build-ax (release binaries and images):
//
//	-ldflags "-X github.com/ax-run/ax/internal/cli.version=v1.2.3
//	          -X github.com/ax-run/ax/internal/cli.commit=<sha>
//	          -X github.com/ax-run/ax/internal/cli.date=<RFC 3339>"
//
// Empty (a plain go build) means: read what the Go toolchain recorded in
// the binary (module version, VCS revision and time), else "unknown".
var version, commit, date string

// buildVersion is what `ax version` prints.
type buildVersion struct {
	// Version is the module version: a release tag, a Go pseudo-version
	// (v0.0.0-<time>-<commit>), or "(devel)" for a plain build in the tree.
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from.
	Commit string `json:"commit"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified"`
	// Date is when it was built (release builds: the commit's time, so a
	// rebuild of the same commit is identical).
	Date string `json:"date"`
	// Go is the toolchain that built it; OS and Arch its target.
	Go   string `json:"go"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// NATSServer is the nats-server linked in (what `ax dev` and `ax
	// server` run), which is the go.mod version that deploy/ and the
	// images ship and that the tests run against.
	NATSServer string `json:"nats_server"`
	// NATSClient is the nats.go client version.
	NATSClient string `json:"nats_go"`
}

// readVersion combines the stamped variables with the binary's build
// information.
func readVersion() buildVersion {
	v := buildVersion{Version: version, Commit: commit, Date: date, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		NATSServer: "v" + server.VERSION, NATSClient: "v" + nats.Version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if v.Commit == "" {
					v.Commit = s.Value
				}
			case "vcs.time":
				if v.Date == "" {
					v.Date = s.Value
				}
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	for _, f := range []*string{&v.Version, &v.Commit, &v.Date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	return v
}

func versionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date of ax, and the nats-server it embeds",
		Example: `  ax version
  ax version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := readVersion()
			if g.jsonOutput() {
				return g.printJSON(v)
			}
			w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			rev := v.Commit
			if v.Modified {
				rev += " (modified)"
			}
			fmt.Fprintf(w, "ax\t%s\n", v.Version)
			fmt.Fprintf(w, "commit\t%s\n", rev)
			fmt.Fprintf(w, "built\t%s\n", v.Date)
			fmt.Fprintf(w, "go\t%s %s/%s\n", v.Go, v.OS, v.Arch)
			fmt.Fprintf(w, "nats-server\t%s (embedded by ax dev and ax server; the version deploy/ ships)\n", v.NATSServer)
			fmt.Fprintf(w, "nats.go\t%s\n", v.NATSClient)
			return w.Flush()
		},
	}
}
