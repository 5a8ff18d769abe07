// Package natsserver runs an embedded NATS server with JetStream, for
// `ax dev`, benchmarks and tests.
package natsserver

import (
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config configures an embedded server.
type Config struct {
	// StoreDir is where JetStream keeps its data. Required.
	StoreDir string
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on. 0 (the default) picks a free port.
	Port int
	// SyncAlways fsyncs every write (sync_interval: always). Default false:
	// the server's default periodic flush.
	SyncAlways bool
	// Debug enables the server's own logging to stderr.
	Debug bool
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	cfg Config
}

// Start runs a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("start embedded nats: store dir is required")
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:         "ax-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 1 << 30,
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start embedded nats: %w", err)
	}
	if cfg.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	// A generous bound: a loaded machine (a test suite, a cold disk) can
	// take seconds to recover a store; this is no timing assertion.
	if !s.ReadyForConnections(readyWait) {
		s.Shutdown()
		return nil, fmt.Errorf("start embedded nats: not ready after %s", readyWait)
	}
	return &Server{Server: s, cfg: cfg}, nil
}

// readyWait bounds the wait for an embedded server to accept connections.
const readyWait = time.Minute

// URL is the client URL of the server.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it to finish.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart stops the server and starts a new one on the same port and store.
func (s *Server) Restart() (*Server, error) {
	cfg := s.cfg
	if tcp, ok := s.Addr().(*net.TCPAddr); ok {
		cfg.Port = tcp.Port
	}
	s.Stop()
	return Start(cfg)
}
