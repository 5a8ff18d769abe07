// Package conformance holds AX's conformance suite: language-neutral
// scenarios (scenarios/*.json) that drive an executor process and a
// producer process of any language through the wire contract
// (subjects.md), against a real nats-server and a real `ax orchestrator`,
// and check the outcomes in the tasks' histories. Each language has an
// adapter (README.md): Go's is ./goexec, TypeScript's is
// sdk-ts/conformance/adapter.ts. A new language is a new adapter.
//
// AX_CONFORMANCE_ADAPTERS=go,ts (the default) chooses the adapters; the
// TypeScript one needs node and npm (it runs `npm ci` when sdk-ts has no
// node_modules, then `npm run build`). With -short nothing runs.
package conformance

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/sdk"
)

// bins are the binaries built once per run.
var bins struct {
	natsServer, ax, goexec string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !testingShort() {
		// A stable directory: go build skips the link of a binary that is
		// up to date. One per checkout: suites of other checkouts (other
		// worktrees of the repository) running at the same time would
		// otherwise replace these binaries with their own under running
		// tests. NATS_SERVER_BIN and AX_BIN, when set, are used as they
		// are (scripts/test builds them once for npm test and here).
		root, err := filepath.Abs("..")
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			return 1
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("ax-conformance-bin-%d-%x", os.Getuid(), sum[:8]))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "conformance:", err)
			return 1
		}
		for _, b := range []struct {
			out *string
			env string
			pkg string
		}{
			{&bins.natsServer, "NATS_SERVER_BIN", "github.com/nats-io/nats-server/v2"},
			{&bins.ax, "AX_BIN", "./cmd/ax"},
			{&bins.goexec, "", "./conformance/goexec"},
		} {
			if b.env != "" && os.Getenv(b.env) != "" {
				*b.out = os.Getenv(b.env)
				continue
			}
			*b.out = filepath.Join(dir, filepath.Base(b.pkg))
			cmd := exec.Command(goTool(), "build", "-o", *b.out, b.pkg)
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "conformance: go build %s: %v\n%s", b.pkg, err, out)
				return 1
			}
		}
	}
	return m.Run()
}

func testingShort() bool {
	for _, a := range os.Args {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// adapter is how to start one language's executor and producer.
type adapter struct {
	name     string
	executor []string
	producer []string
}

// adapters returns the adapters chosen by AX_CONFORMANCE_ADAPTERS.
func adapters(t *testing.T) []adapter {
	names := strings.Split(os.Getenv("AX_CONFORMANCE_ADAPTERS"), ",")
	if os.Getenv("AX_CONFORMANCE_ADAPTERS") == "" {
		names = []string{"go", "ts"}
	}
	var out []adapter
	for _, n := range names {
		out = append(out, newAdapter(t, strings.TrimSpace(n)))
	}
	return out
}

// newAdapter returns the adapter called name (building sdk-ts for "ts").
func newAdapter(t *testing.T, name string) adapter {
	switch name {
	case "go":
		return adapter{name: "go", executor: []string{bins.goexec, "executor"}, producer: []string{bins.goexec, "producer"}}
	case "ts":
		js := buildTS(t)
		// AX_CONFORMANCE_NODE_ARGS: extra node flags (--cpu-prof, say).
		node := append([]string{"node"}, strings.Fields(os.Getenv("AX_CONFORMANCE_NODE_ARGS"))...)
		return adapter{name: "ts", executor: append(slices.Clone(node), js, "executor"), producer: append(slices.Clone(node), js, "producer")}
	}
	t.Fatalf("unknown adapter %q in AX_CONFORMANCE_ADAPTERS", name)
	return adapter{}
}

// buildTS builds sdk-ts (npm ci first when it has no node_modules) once
// per run of the suite and returns the TypeScript adapter's script.
func buildTS(t *testing.T) string {
	t.Helper()
	tsBuild.once.Do(func() { tsBuild.script, tsBuild.err = buildTSOnce() })
	if tsBuild.err != nil {
		t.Fatal(tsBuild.err)
	}
	return tsBuild.script
}

var tsBuild struct {
	once   sync.Once
	script string
	err    error
}

func buildTSOnce() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("the TypeScript adapter needs node (scripts/ensure-node installs Debian's), or set AX_CONFORMANCE_ADAPTERS=go")
	}
	dir, err := filepath.Abs("../sdk-ts")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("npm ci in sdk-ts: %v\n%s", err, out)
		}
	}
	cmd := exec.Command("npm", "run", "--silent", "build")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm run build in sdk-ts: %v\n%s", err, out)
	}
	return filepath.Join(dir, "dist", "conformance", "adapter.js"), nil
}

// env is one AX deployment: a nats-server and an orchestrator, shared by
// every scenario of every adapter (each scenario has its own capability).
type env struct {
	t   *testing.T
	dir string
	url string
	// auth: the server runs the users of `ax nats-accounts` (password
	// authPassword each) and every process connects as its role's user.
	auth   bool
	nc     *nats.Conn
	js     jetstream.JetStream
	client *sdk.Client
	events *events
	procs  []*proc
	orch   *proc // the orchestrator running now
}

// authPassword is every user's password in an auth env.
const authPassword = "conformance"

// authCapabilities are the capabilities of the auth env's executor users
// (one per adapter), and authProducer its producer user.
var authCapabilities = []string{"go-perm", "ts-perm"}

const authProducer = "perm"

// userArgs are the flags of an ax command connecting as user in an auth env.
func (e *env) userArgs(user string) []string {
	if !e.auth {
		return nil
	}
	return []string{"--user", user, "--password", authPassword, "--inbox-prefix", "_INBOX." + user}
}

// codecKeys is the AES-256-GCM key every adapter process holds
// (AX_CODEC_KEYS): executors decode encoded payloads and pass clear ones,
// producers encode the submissions marked "codec".
var codecKeys = "conf1 " + base64.StdEncoding.EncodeToString([]byte("conformance-suite-aes-key-32-byt"))

// userEnv is an adapter process's environment connecting as user.
func (e *env) userEnv(user string) []string {
	env := []string{"AX_NATS_URL=" + e.url, "AX_CODEC_KEYS=" + codecKeys}
	if e.auth {
		env = append(env, "AX_USER="+user, "AX_PASSWORD="+authPassword, "AX_INBOX_PREFIX=_INBOX."+user, "AX_CALLER="+user)
	}
	return env
}

// startEnv starts a nats-server on a random port with its store in a temp
// dir and an orchestrator, after `ax topology`. With auth the server has
// AX's account of `ax nats-accounts` (executor users for
// authCapabilities, serving the types conf.>; a producer limited to
// conf.> that may cancel; the operator user "suite" the suite reads as).
func startEnv(t *testing.T, auth bool) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), events: newEvents(), auth: auth}
	t.Cleanup(e.cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	args := []string{bins.natsServer, "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", filepath.Join(e.dir, "js"), "--ports_file_dir", e.dir}
	if auth {
		args = append(args, "-c", e.writeAccounts(ctx))
	}
	srv, _, _ := startProc(t, e.dir, "nats-server", args, nil, false)
	e.procs = append(e.procs, srv)
	e.url = waitPorts(ctx, t, e.dir, srv)

	// The operator's step: AX's topology, so clients may bind at once.
	topo := append([]string{"topology", "--nats", e.url}, e.userArgs("orchestrator")...)
	if out, err := exec.CommandContext(ctx, bins.ax, topo...).CombinedOutput(); err != nil {
		t.Fatalf("ax topology: %v\n%s", err, out)
	}
	e.startOrchestrator("orchestrator")

	opts := []nats.Option{nats.Name("conformance"), nats.MaxReconnects(-1)}
	if auth {
		opts = append(opts, nats.UserInfo("suite", authPassword), nats.CustomInboxPrefix("_INBOX.suite"))
	}
	nc, err := nats.Connect(e.url, opts...)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	e.nc = nc
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if !auth { // executors of an auth env may not publish events
		if _, err := nc.Subscribe("conformance.events.>", e.events.add); err != nil {
			t.Fatal(err)
		}
	}
	if e.client, err = sdk.New(ctx, nc); err != nil {
		t.Fatal(err)
	}
	return e
}

// startOrchestrator starts the env's orchestrator (logging to name.log).
func (e *env) startOrchestrator(name string) {
	orch, _, _ := startProc(e.t, e.dir, name, append([]string{bins.ax, "orchestrator", "--nats", e.url, "--node-id", "conformance",
		"--log-level", "warn", "--retry-base", "100ms", "--retry-max", "400ms", "--ack-wait", "5s"}, e.userArgs("orchestrator")...), nil, false)
	e.procs = append(e.procs, orch)
	e.orch = orch
}

// restartOrchestrator kills the orchestrator with SIGKILL and starts
// another one (the same node id) in its place, logging to name.log.
func (e *env) restartOrchestrator(name string) {
	e.orch.kill9(e.t)
	e.startOrchestrator(name)
}

// writeAccounts writes the auth env's server configuration: AX's account
// as `ax nats-accounts` prints it, every password authPassword.
func (e *env) writeAccounts(ctx context.Context) string {
	t := e.t
	args := []string{"nats-accounts", "--producer=" + authProducer + "=conf.>", "--producers-cancel", "--operator=suite"}
	for _, c := range authCapabilities {
		args = append(args, "--executor="+c+"=conf.>")
	}
	accounts, err := exec.CommandContext(ctx, bins.ax, args...).Output()
	if err != nil {
		t.Fatalf("ax nats-accounts: %v", err)
	}
	var pw strings.Builder
	seen := map[string]bool{}
	for _, v := range regexp.MustCompile(`\$AX_PASSWORD_[A-Z0-9_]+`).FindAllString(string(accounts), -1) {
		if !seen[v] {
			seen[v] = true
			fmt.Fprintf(&pw, "%s: %q\n", v[1:], authPassword)
		}
	}
	for name, data := range map[string]string{"accounts.conf": string(accounts), "passwords.conf": pw.String(),
		"server.conf": "include \"accounts.conf\"\n"} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(e.dir, "server.conf")
}

// waitPorts waits for the nats-server's ports file and returns its client URL.
func waitPorts(ctx context.Context, t *testing.T, dir string, srv *proc) string {
	t.Helper()
	pattern := filepath.Join(dir, fmt.Sprintf("*_%d.ports", srv.cmd.Process.Pid))
	for {
		if files, _ := filepath.Glob(pattern); len(files) > 0 {
			data, err := os.ReadFile(files[0])
			var ports struct {
				Nats []string `json:"nats"`
			}
			if err == nil && json.Unmarshal(data, &ports) == nil && len(ports.Nats) > 0 {
				return ports.Nats[0]
			}
		}
		select {
		case <-srv.done:
			t.Fatalf("nats-server exited: %v\n%s", srv.err, tail(srv.logPath, 20))
		case <-ctx.Done():
			t.Fatalf("nats-server wrote no ports file: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (e *env) cleanup() {
	if e.nc != nil {
		e.nc.Close()
	}
	// The orchestrator and the server must have run throughout; how they
	// stop is not this suite's subject (e2e's), so an unclean exit after
	// SIGTERM is only logged.
	for _, p := range e.procs {
		if !p.alive() && !p.killed {
			e.t.Errorf("%s died during the test: %v", p.name, p.err)
		}
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		if err := p.term(15 * time.Second); err != nil {
			e.t.Logf("stopping: %v\n%s", err, tail(p.logPath, 10))
		}
	}
	for _, p := range e.procs {
		data, _ := os.ReadFile(p.logPath)
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if strings.Contains(string(data), bad) {
				e.t.Errorf("log of %s contains %q", p.name, bad)
			}
		}
		if e.t.Failed() {
			e.t.Logf("----- tail of %s -----\n%s", p.name, tail(p.logPath, 30))
		}
	}
}

// TestConformance runs every scenario against every adapter.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server, an orchestrator and adapter processes")
	}
	scenarios := loadScenarios(t)
	ads := adapters(t)
	e := startEnv(t, false)
	var authEnv *env
	for _, sc := range scenarios {
		if sc.Auth && authEnv == nil {
			authEnv = startEnv(t, true)
		}
	}
	for _, ad := range ads {
		t.Run(ad.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			producers := map[*env]*producer{}
			for _, en := range []*env{e, authEnv} {
				if en == nil {
					continue
				}
				name := ad.name + "-producer"
				if en.auth {
					name += "-auth"
				}
				pr, err := startProducer(ctx, t, en.dir, name, ad.producer, en.userEnv(authProducer))
				if err != nil {
					t.Fatal(err)
				}
				producers[en] = pr
				defer func() {
					if err := pr.close(); err != nil {
						t.Errorf("producer: %v", err)
					}
				}()
			}
			// The scenarios of one adapter run side by side (each has its
			// own capability and executors), at most a few at once on a
			// small machine.
			sem := make(chan struct{}, max(2, runtime.NumCPU()))
			t.Run("scenario", func(t *testing.T) { // returns once its parallel subtests ended
				for _, sc := range scenarios {
					t.Run(sc.Name, func(t *testing.T) {
						t.Parallel()
						sem <- struct{}{}
						defer func() { <-sem }()
						en := e
						if sc.Auth {
							en = authEnv
						}
						runScenario(t, en, ad, producers[en], sc)
					})
				}
			})
		})
	}
}

// loadScenarios reads scenarios/*.json, sorted by name.
func loadScenarios(t *testing.T) []scenario {
	t.Helper()
	files, err := filepath.Glob("scenarios/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	var out []scenario
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var sc scenario
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".json"); sc.Name != want {
			t.Fatalf("%s: name %q, want %q", f, sc.Name, want)
		}
		out = append(out, sc)
	}
	slices.SortFunc(out, func(a, b scenario) int { return strings.Compare(a.Name, b.Name) })
	return out
}
