package check

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

const composeDir = "../compose"

// composeEnv is what .env gives the stack (README.md).
var composeEnv = map[string]string{"AX_CONSOLE_TOKEN": "0123456789abcdef", "MYSQL_PASSWORD": "fedcba9876543210"}

// loadCompose loads a compose file with compose-go, the reference loader
// of the Compose specification: it validates against the specification's
// schema (an unknown key is an error), interpolates and normalizes as
// `docker compose config` does.
func loadCompose(t *testing.T, file string, env map[string]string) (*types.Project, error) {
	t.Helper()
	dir, err := filepath.Abs(composeDir)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: file}},
		Environment: env,
	}, func(o *loader.Options) {
		o.SetProjectName("ax", true)
		o.Profiles = []string{"*"}
		o.ResolvePaths = true
	})
}

// TestCompose loads deploy/compose/compose.yaml strictly and checks that
// every service runs what the images hold, with commands, flags and
// configuration the binaries accept.
func TestCompose(t *testing.T) {
	file, _ := filepath.Abs(filepath.Join(composeDir, "compose.yaml"))
	p, err := loadCompose(t, file, composeEnv)
	if err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"ax", "console", "mirror", "mysql", "nats-1", "nats-2", "nats-3", "orchestrator-1", "orchestrator-2", "worker"}
	if !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	// Images: built here (scripts/image), but for MySQL, the one pulled.
	var pulled []string
	for _, n := range names {
		img := p.Services[n].Image
		switch {
		case strings.HasPrefix(n, "nats-"):
			if img != "localhost/ax-nats-server:latest" {
				t.Errorf("%s runs %s", n, img)
			}
		case n == "mysql":
			pulled = append(pulled, img)
		default:
			if img != "localhost/ax:latest" {
				t.Errorf("%s runs %s", n, img)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(composeDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pulled) != 1 || !strings.Contains(string(readme), "`"+pulled[0]+"`") {
		t.Errorf("images pulled from a registry: %v; README.md must name the one", pulled)
	}

	help := axHelp(t, "orchestrator", "worker", "mirror", "console", "status")
	_, natsServer := build(t)
	natsURLs := "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"
	for _, n := range names {
		s := p.Services[n]
		switch {
		case n == "mysql":
			if s.HealthCheck == nil || len(s.HealthCheck.Test) == 0 {
				t.Errorf("mysql has no healthcheck")
			}
		case strings.HasPrefix(n, "nats-"):
			checkNATSService(t, natsServer, n, s, names)
		default:
			axAccepts(t, n, s.Command)
			for k := range s.Environment {
				if !regexp.MustCompile(`\b` + k + `\b`).MatchString(help) {
					t.Errorf("%s: ax reads no environment variable %s", n, k)
				}
			}
			if u := s.Environment["AX_NATS_URL"]; u == nil || *u != natsURLs {
				t.Errorf("%s: AX_NATS_URL %v, want the three nodes %s", n, u, natsURLs)
			}
			if !s.ReadOnly {
				t.Errorf("%s: root file system not read-only", n)
			}
			if n == "ax" {
				continue
			}
			hc := s.HealthCheck
			if hc == nil || len(hc.Test) < 4 || hc.Test[0] != "CMD" || hc.Test[1] != "/usr/local/bin/ax" {
				t.Errorf("%s: healthcheck %+v is not ax healthcheck", n, hc)
				continue
			}
			axAccepts(t, n+" healthcheck", hc.Test[2:])
			port := regexp.MustCompile(`:(\d+)/readyz$`).FindStringSubmatch(hc.Test[3])
			if port == nil || !strings.Contains(strings.Join(s.Command, " "), ":"+port[1]) {
				t.Errorf("%s: healthcheck %s asks a port the command does not serve (%v)", n, hc.Test[3], s.Command)
			}
		}
	}

	// R3, and the second orchestrator waits for the first.
	for _, n := range []string{"orchestrator-1", "orchestrator-2"} {
		if !strings.Contains(strings.Join(p.Services[n].Command, " "), "--replicas 3") {
			t.Errorf("%s does not ask for R3 streams: %v", n, p.Services[n].Command)
		}
	}
	for _, dep := range []struct{ service, on string }{
		{"orchestrator-2", "orchestrator-1"}, {"mirror", "mysql"}, {"mirror", "orchestrator-1"},
		{"console", "orchestrator-1"}, {"worker", "orchestrator-1"},
	} {
		if d, ok := p.Services[dep.service].DependsOn[dep.on]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s does not wait for %s to be healthy", dep.service, dep.on)
		}
	}
	if r := p.Services["worker"].Deploy; r == nil || r.Replicas == nil || *r.Replicas < 2 {
		t.Errorf("fewer than two demo executors")
	}
}

// checkNATSService runs the node's command with nats-server -t (check the
// configuration and exit), its mounted configuration and its environment.
func checkNATSService(t *testing.T, natsServer, name string, s types.ServiceConfig, services []string) {
	t.Helper()
	args := slices.Clone(s.Command)
	i := slices.Index(args, "-c")
	if i < 0 || i+1 >= len(args) {
		t.Errorf("%s: no -c in %v", name, args)
		return
	}
	var conf string
	for _, v := range s.Volumes {
		if v.Target == args[i+1] && v.Type == types.VolumeTypeBind {
			conf = v.Source
		}
	}
	if conf == "" {
		t.Errorf("%s: %s is not mounted", name, args[i+1])
		return
	}
	args[i+1] = conf
	cmd := exec.Command(natsServer, append(args, "-t")...)
	for k, v := range s.Environment {
		cmd.Env = append(cmd.Env, k+"="+*v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: nats-server %s -t: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range services {
		if strings.HasPrefix(other, "nats-") && !strings.Contains(string(b), fmt.Sprintf("nats-route://%s:6222", other)) {
			t.Errorf("%s routes to no %s", conf, other)
		}
	}
	if !regexp.MustCompile(`(?m)^\s*sync_interval: always`).Match(b) {
		t.Errorf("%s does not fsync every write", conf)
	}
}

// TestComposeIsStrict: the loader refuses a misspelt key and a missing
// secret, so TestCompose's success means something.
func TestComposeIsStrict(t *testing.T) {
	file, _ := filepath.Abs(filepath.Join(composeDir, "compose.yaml"))
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(b), "stop_grace_period:", "stop_grace_periods:", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCompose(t, bad, composeEnv); err == nil || !strings.Contains(err.Error(), "stop_grace_periods") {
		t.Errorf("a misspelt key loaded: %v", err)
	}
	if _, err := loadCompose(t, file, map[string]string{"AX_CONSOLE_TOKEN": "0123456789abcdef"}); err == nil || !strings.Contains(err.Error(), "MYSQL_PASSWORD") {
		t.Errorf("a stack without MYSQL_PASSWORD loaded: %v", err)
	}
}
