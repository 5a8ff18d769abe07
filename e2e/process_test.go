package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-run/ax/internal/demo"
	"github.com/ax-run/ax/sdk"
	"github.com/ax-run/ax/task"
)

// proc is one ax process that can be killed and started again with the same
// arguments. Its stdout and stderr of every start are appended to one log.
type proc struct {
	c       *cluster
	name    string
	args    []string
	logPath string
	starts  int
	cur     *run
	// stopped is set while the process is down on purpose.
	stopped bool
}

// run is one start of a proc.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, valid after done
}

// cluster is the set of processes of one test, all in t.TempDir(). When the
// test ends it checks that no process died unexpectedly or panicked, kills
// them all and, if the test failed, prints the tail of every log.
type cluster struct {
	t      *testing.T
	dir    string
	procs  []*proc
	server *proc
	url    string
	port   int
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	if axBin == "" {
		t.Skip("e2e tests need the ax binary (skipped with -short)")
	}
	c := &cluster{t: t, dir: t.TempDir()}
	// Registered after TempDir's cleanup, so it runs before the dir is removed.
	t.Cleanup(c.cleanup)
	return c
}

func (c *cluster) cleanup() {
	t := c.t
	for _, p := range c.procs {
		if p.cur == nil {
			continue
		}
		select {
		case <-p.cur.done:
			if !p.stopped {
				t.Errorf("process %s exited unexpectedly: %v", p.name, p.cur.err)
			}
		default:
		}
	}
	for _, p := range c.procs {
		if p.alive() {
			_ = p.cur.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-p.cur.done:
			case <-time.After(10 * time.Second):
				t.Errorf("process %s (pid %d) did not die", p.name, p.cur.cmd.Process.Pid)
			}
		}
	}
	for _, p := range c.procs {
		data, _ := os.ReadFile(p.logPath)
		for _, bad := range []string{"panic:", "fatal error:", "DATA RACE"} {
			if bytes.Contains(data, []byte(bad)) {
				t.Errorf("log of %s contains %q", p.name, bad)
			}
		}
	}
	if dir := os.Getenv("AX_E2E_LOGDIR"); dir != "" {
		// Keep every log for a post-mortem.
		dst := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dst, 0o755); err == nil {
			for _, p := range c.procs {
				if data, err := os.ReadFile(p.logPath); err == nil {
					_ = os.WriteFile(filepath.Join(dst, filepath.Base(p.logPath)), data, 0o644)
				}
			}
		}
	}
	if t.Failed() {
		for _, p := range c.procs {
			t.Logf("----- tail of %s (%s) -----\n%s", p.name, p.logPath, tail(p.logPath, 40))
		}
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// newProc registers a process; start it with start.
func (c *cluster) newProc(name string, args ...string) *proc {
	p := &proc{c: c, name: name, args: args, logPath: filepath.Join(c.dir, name+".log")}
	c.procs = append(c.procs, p)
	return p
}

// start starts the process (again).
func (p *proc) start() {
	p.c.t.Helper()
	p.startBinary(axBin)
}

// startBinary starts p running bin (ax, or a nats-server build).
func (p *proc) startBinary(bin string) {
	t := p.c.t
	t.Helper()
	if p.alive() {
		t.Fatalf("start %s: already running", p.name)
	}
	p.starts++
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	defer log.Close()
	fmt.Fprintf(log, "===== %s start #%d at %s: %s %s\n", p.name, p.starts, time.Now().Format("15:04:05.000"), filepath.Base(bin), strings.Join(p.args, " "))
	cmd := exec.Command(bin, p.args...)
	cmd.Stderr = log
	cmd.Stdout = log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	p.cur, p.stopped = r, false
}

func (p *proc) alive() bool {
	if p.cur == nil {
		return false
	}
	select {
	case <-p.cur.done:
		return false
	default:
		return true
	}
}

func (p *proc) pid() int { return p.cur.cmd.Process.Pid }

// kill9 kills the process with SIGKILL and waits until it is gone.
func (p *proc) kill9() {
	p.c.t.Helper()
	p.signal(syscall.SIGKILL, 10*time.Second)
}

// term sends SIGTERM and waits for a clean exit.
func (p *proc) term() {
	t := p.c.t
	t.Helper()
	p.signal(syscall.SIGTERM, 30*time.Second)
	if err := p.cur.err; err != nil {
		t.Errorf("%s exited with %v after SIGTERM, want a clean exit", p.name, err)
	}
}

func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	t := p.c.t
	t.Helper()
	if !p.alive() {
		t.Fatalf("signal %s: not running (%v)", p.name, p.cur.err)
	}
	p.stopped = true
	if err := p.cur.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
	select {
	case <-p.cur.done:
	case <-time.After(wait):
		_ = p.cur.cmd.Process.Signal(syscall.SIGKILL)
		<-p.cur.done
		t.Fatalf("%s did not exit within %s of %v", p.name, wait, sig)
	}
}

// startServer starts `ax server` on a free port with its store in the
// cluster's directory and waits for it to print its URL, then creates AX's
// topology (ax topology with topologyArgs).
func (c *cluster) startServer(topologyArgs ...string) {
	c.t.Helper()
	store := filepath.Join(c.dir, "store")
	c.server = c.newProc("server", "server", "--store", store, "--port", "0", "--log-level", "warn")
	c.server.start()
	c.url = c.waitServerURL()
	u, err := url.Parse(c.url)
	if err != nil {
		c.t.Fatalf("server URL %q: %v", c.url, err)
	}
	if c.port, err = strconv.Atoi(u.Port()); err != nil || c.port == 0 {
		c.t.Fatalf("server URL %q has no port", c.url)
	}
	// Every restart uses the same port and store.
	c.server.args = []string{"server", "--store", store, "--port", strconv.Itoa(c.port), "--log-level", "warn"}
	// The operator's step: create AX's streams, so clients (which only bind)
	// may connect before an orchestrator runs.
	if out, err := exec.Command(axBin, append([]string{"topology", "--nats", c.url}, topologyArgs...)...).CombinedOutput(); err != nil {
		c.t.Fatalf("ax topology: %v\n%s", err, out)
	}
}

// restartServer stops the server (SIGTERM, or SIGKILL with kill9) and starts
// it again on the same port and store.
func (c *cluster) restartServer(kill9 bool) {
	c.t.Helper()
	if kill9 {
		c.server.kill9()
	} else {
		c.server.term()
	}
	c.server.start()
	if got := c.waitServerURL(); got != c.url {
		c.t.Fatalf("restarted server at %s, want %s", got, c.url)
	}
}

// waitServerURL waits for the current server start to print its URL (the
// first line of stdout, which goes to the log after a start marker).
func (c *cluster) waitServerURL() string {
	c.t.Helper()
	p := c.server
	marker := fmt.Sprintf("===== %s start #%d ", p.name, p.starts)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !p.alive() {
			c.t.Fatalf("server exited at start: %v\n%s", p.cur.err, tail(p.logPath, 30))
		}
		data, _ := os.ReadFile(p.logPath)
		if i := bytes.LastIndex(data, []byte(marker)); i >= 0 {
			sc := bufio.NewScanner(bytes.NewReader(data[i:]))
			sc.Scan() // the marker line
			for sc.Scan() {
				if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "nats://") {
					return line
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("server printed no URL within 30s\n%s", tail(p.logPath, 30))
	return ""
}

// logLevel is the log level of orchestrators and workers: warn, or
// AX_E2E_LOG_LEVEL (e.g. debug, with AX_E2E_LOGDIR to keep the logs).
func logLevel() string {
	if l := os.Getenv("AX_E2E_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}

// startOrchestrator starts an orchestrator with fast retries and extra
// arguments.
func (c *cluster) startOrchestrator(nodeID string, extra ...string) *proc {
	c.t.Helper()
	args := append([]string{"orchestrator", "--nats", c.url, "--node-id", nodeID, "--log-level", logLevel(),
		"--retry-base", "100ms", "--retry-max", "500ms", "--ack-wait", "5s"}, extra...)
	p := c.newProc(nodeID, args...)
	p.start()
	return p
}

// startWorker starts an executor with the demo handlers.
func (c *cluster) startWorker(id string, extra ...string) *proc {
	c.t.Helper()
	args := append([]string{"worker", "--nats", c.url, "--id", id, "--log-level", logLevel()}, extra...)
	p := c.newProc(id, args...)
	p.start()
	return p
}

// connect returns the test's own NATS connection (reconnecting forever) and
// an SDK client on it.
func (c *cluster) connect() (*nats.Conn, *sdk.Client) {
	c.t.Helper()
	nc, err := nats.Connect(c.url, nats.Name("ax-e2e"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		c.t.Fatalf("connect to %s: %v", c.url, err)
	}
	c.t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := sdk.New(ctx, nc)
	if err != nil {
		c.t.Fatalf("sdk client: %v", err)
	}
	return nc, cl
}

// warmUpPrefix starts the ids of warm-up tasks, which are no workload's.
const warmUpPrefix = "warmup-"

// warmUp runs one demo.noop per capability and waits until it succeeded, so
// the orchestrator and the only worker serving each capability are known to
// be up before faults are injected (a process whose NATS server goes away
// while it starts exits, which is not what the tests are about).
func warmUp(t *testing.T, cl *sdk.Client, capabilities ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, capability := range capabilities {
		s, err := task.New(demo.TypeNoop, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.ID, s.Capability = warmUpPrefix+capability, capability
		if _, err := cl.Submit(ctx, s); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
		if got, err := cl.Wait(ctx, s.ID); err != nil || got.State != task.Succeeded {
			t.Fatalf("warm-up task on %s: %+v, %v", capability, got, err)
		}
	}
}

// waitConnected waits until nc has reconnected after a server restart.
func waitConnected(t *testing.T, nc *nats.Conn) {
	t.Helper()
	eventually(t, 30*time.Second, "the test's NATS connection to reconnect", func() (bool, string) {
		return nc.IsConnected(), nc.Status().String()
	})
}

// eventually polls cond until it holds or timeout passes; the string is
// reported on timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := 10 * time.Millisecond
	var last string
	for {
		ok, status := cond()
		if ok {
			return
		}
		last = status
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(interval)
		interval = min(2*interval, 500*time.Millisecond)
	}
}

// waitDrained waits until a durable consumer has nothing pending and nothing
// unacknowledged: every message was handled and acknowledged.
func waitDrained(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, consumer string, timeout time.Duration, what string) {
	t.Helper()
	eventually(t, timeout, what, func() (bool, string) {
		info, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			return false, err.Error()
		}
		ci := info.CachedInfo()
		return ci.NumPending == 0 && ci.NumAckPending == 0,
			fmt.Sprintf("%d pending, %d unacked, %d redelivered", ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
	})
}

// retryOp runs op until it succeeds or timeout passes (for client calls
// while the server restarts; every op used with it is idempotent).
func retryOp(t *testing.T, timeout time.Duration, what string, op func(ctx context.Context) error) {
	t.Helper()
	if err := retry(timeout, op); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// retry runs op until it succeeds or timeout passes; a rejection is final.
func retry(timeout time.Duration, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return nil
		}
		var rej *sdk.RejectedError
		if errors.As(err, &rej) || time.Now().After(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
