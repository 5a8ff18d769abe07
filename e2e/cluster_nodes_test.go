//go:build unix

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ax-run/ax/internal/tcpproxy"
)

// natsCluster is a 3-node nats-server cluster (real processes, built from
// the module's nats-server version) whose route links all go through
// tcpproxy proxies, one per directed link, so a test can partition a node.
type natsCluster struct {
	c     *cluster
	bin   string
	nodes []*natsNode
	// links[i][j] carries node i's route to node j (nil when i == j).
	links [][]*tcpproxy.Proxy
	// advertise is every node's advertised cluster address: a port that
	// refuses connections (see refusingPort).
	advertise string
}

// natsNode is one nats-server process; restarts keep its ports and store.
type natsNode struct {
	name        string
	proc        *proc
	clientPort  int
	clusterPort int
	httpPort    int
	store       string
	conf        string
	paused      bool
}

// URL is the node's client URL.
func (n *natsNode) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.clientPort) }

// buildNATSServer compiles the nats-server of go.mod's version into dir.
func buildNATSServer(t *testing.T, dir string) string {
	t.Helper()
	goTool := goBinary()
	root, err := moduleRoot(goTool)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "nats-server")
	start := time.Now()
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "--version").CombinedOutput()
	t.Logf("built %s in %s", strings.TrimSpace(string(out)), time.Since(start).Round(100*time.Millisecond))
	return bin
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln := heldPort(t)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// heldPort listens on a free port of 127.0.0.1: the port stays taken until
// the listener is closed, so listeners opened meanwhile on port 0 (the
// proxies) cannot be given it.
func heldPort(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startNATSCluster writes the configurations of n nodes and starts them,
// waiting until every node reports JetStream healthy.
func startNATSCluster(t *testing.T, c *cluster, n int, syncAlways bool) *natsCluster {
	t.Helper()
	nc := &natsCluster{c: c, bin: buildNATSServer(t, c.dir)}
	nc.advertise = "127.0.0.1:" + strconv.Itoa(refusingPort(t))
	// The nodes' ports are held until the proxies have theirs: a proxy
	// given a node's cluster port (released, then handed out again) made
	// that node fail to start ("address already in use").
	var held []net.Listener
	port := func() int {
		ln := heldPort(t)
		held = append(held, ln)
		return ln.Addr().(*net.TCPAddr).Port
	}
	for i := range n {
		name := "n" + strconv.Itoa(i+1)
		nc.nodes = append(nc.nodes, &natsNode{
			name:        name,
			clientPort:  port(),
			clusterPort: port(),
			httpPort:    port(),
			store:       filepath.Join(c.dir, name+"-store"),
			conf:        filepath.Join(c.dir, name+".conf"),
		})
	}
	nc.links = make([][]*tcpproxy.Proxy, n)
	for i := range n {
		nc.links[i] = make([]*tcpproxy.Proxy, n)
		for j := range n {
			if i == j {
				continue
			}
			p, err := tcpproxy.New("127.0.0.1:0", "127.0.0.1:"+strconv.Itoa(nc.nodes[j].clusterPort))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			nc.links[i][j] = p
		}
	}
	for _, ln := range held {
		ln.Close()
	}
	for i, node := range nc.nodes {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, "    nats-route://"+nc.links[i][j].Addr())
			}
		}
		sync := ""
		if syncAlways {
			sync = "  sync_interval: always\n"
		}
		conf := fmt.Sprintf(`# written by TestCluster
server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 8GB
%s}
cluster {
  name: ax-e2e
  listen: 127.0.0.1:%d
  advertise: %q
  routes: [
%s
  ]
}
`, node.name, node.clientPort, node.httpPort, node.store, sync, node.clusterPort, nc.advertise, strings.Join(routes, "\n"))
		if err := os.WriteFile(node.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		node.proc = c.newProc(node.name, "-c", node.conf)
		nc.start(node)
	}
	for _, node := range nc.nodes {
		nc.waitHealthy(t, node, 60*time.Second)
	}
	return nc
}

// URLs is the comma-separated list of client URLs, starting with node
// first (nats.go accepts such a list and fails over along it).
func (nc *natsCluster) URLs(first int) string {
	var urls []string
	for k := range nc.nodes {
		urls = append(urls, nc.nodes[(first+k)%len(nc.nodes)].URL())
	}
	return strings.Join(urls, ",")
}

// start starts a node's process (again) on its ports and store.
func (nc *natsCluster) start(n *natsNode) {
	n.proc.startBinary(nc.bin)
	n.paused = false
}

// healthy asks a node's monitoring endpoint whether JetStream is healthy
// (it has a meta leader and its streams and consumers are current).
func (n *natsNode) healthy() (bool, string) {
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get("http://127.0.0.1:" + strconv.Itoa(n.httpPort) + "/healthz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(body))
}

// waitHealthy polls a node's /healthz until it is ok; a node not healthy
// within timeout (or exiting) fails the test. For start-up only.
func (nc *natsCluster) waitHealthy(t *testing.T, n *natsNode, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, n.name+" healthy", func() (bool, string) {
		if !n.proc.alive() {
			t.Fatalf("%s exited: %v\n%s", n.name, n.proc.cur.err, tail(n.proc.logPath, 30))
		}
		return n.healthy()
	})
}

// awaitHealthy polls like waitHealthy but only reports how long it took,
// or that it gave up: during the fault phase a slow node is a finding, not
// a reason to stop.
func (nc *natsCluster) awaitHealthy(n *natsNode, timeout time.Duration) (time.Duration, bool, string) {
	start := time.Now()
	var last string
	for time.Since(start) < timeout {
		ok, status := n.healthy()
		if ok {
			return time.Since(start), true, status
		}
		last = status
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start), false, last
}

// partition cuts every link to and from node i.
func (nc *natsCluster) partition(i int) {
	for j := range nc.nodes {
		if j != i {
			nc.links[i][j].Cut()
			nc.links[j][i].Cut()
		}
	}
}

// heal restores every link to and from node i.
func (nc *natsCluster) heal(i int) {
	for j := range nc.nodes {
		if j != i {
			nc.links[i][j].Restore()
			nc.links[j][i].Restore()
		}
	}
}

// healAll restores every link.
func (nc *natsCluster) healAll() {
	for i := range nc.nodes {
		nc.heal(i)
	}
}

// pause stops node i with SIGSTOP; resume continues it.
func (nc *natsCluster) pause(i int) error {
	n := nc.nodes[i]
	if err := n.proc.cur.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.paused = true
	return nil
}

func (nc *natsCluster) resume(i int) error {
	n := nc.nodes[i]
	if !n.paused {
		return nil
	}
	if err := n.proc.cur.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	n.paused = false
	return nil
}
