package natsserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is n embedded servers routed to each other, for benchmarks of
// replicated (R3) streams on one machine.
type Cluster struct {
	Servers []*server.Server
}

// StartCluster runs n clustered servers with JetStream on free ports, each
// storing under its own directory of cfg.StoreDir, and waits until they
// elected a JetStream meta leader.
func StartCluster(n int, cfg Config) (*Cluster, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("start embedded cluster: store dir is required")
	}
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	c := &Cluster{}
	for i := range n {
		opts := &server.Options{
			ServerName:         fmt.Sprintf("ax-bench-%d", i+1),
			Host:               "127.0.0.1",
			Port:               server.RANDOM_PORT,
			JetStream:          true,
			StoreDir:           filepath.Join(cfg.StoreDir, fmt.Sprintf("n%d", i+1)),
			NoSigs:             true,
			MaxPayload:         8 << 20,
			JetStreamMaxMemory: 1 << 30,
			SyncAlways:         cfg.SyncAlways,
			Cluster:            server.ClusterOpts{Name: "ax-bench", Host: "127.0.0.1", Port: ports[i]},
			Routes:             routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("start embedded cluster: %w", err)
		}
		go s.Start()
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if !s.ReadyForConnections(readyWait) {
			c.Stop()
			return nil, fmt.Errorf("start embedded cluster: a server is not ready after %s", readyWait)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, errors.New("start embedded cluster: no JetStream meta leader after 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL lists every server's client URL, comma-separated (as nats.Connect takes them).
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Stop shuts every server down.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
}

// freePorts reserves n free TCP ports and releases them for the caller.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
