// Package tcpproxy is a small TCP forwarder whose link can be cut and
// restored: the cluster fault tests route every NATS cluster link through
// one, so they can partition a node without iptables.
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// DialTimeout bounds the connection to the target.
const DialTimeout = 2 * time.Second

// Proxy listens on a local address and forwards every accepted connection to
// a target address. While cut, it closes the connections it forwards and
// refuses new ones (it accepts and closes them at once, so the port stays
// its own). It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cut      bool
	closed   bool
	conns    map[net.Conn]struct{}
	accepted int
	refused  int
	wg       sync.WaitGroup
}

// New listens on listen (e.g. "127.0.0.1:0") and forwards to target. An empty
// target makes a proxy that refuses everything (a black hole with a port).
func New(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{}), cut: target == ""}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every forwarded connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.target != "" {
		p.cut = false
	}
}

// IsCut reports whether the link is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Stats returns how many connections were forwarded and refused so far, and
// how many sockets (both sides of each link) are open now.
func (p *Proxy) Stats() (forwarded, refused, open int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted, p.refused, len(p.conns)
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. too many open files
			continue
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.accepted++
		p.track(c)
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(c)
	}
}

// track registers a connection; the caller holds mu.
func (p *Proxy) track(c net.Conn) { p.conns[c] = struct{}{} }

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	upstream, err := net.DialTimeout("tcp", p.target, DialTimeout)
	if err != nil {
		p.untrack(client)
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		// Cut while dialling: the new link must not survive the cut.
		p.mu.Unlock()
		_ = upstream.Close()
		p.untrack(client)
		return
	}
	p.track(upstream)
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	// One direction ending (EOF, error, or a cut closing a socket) ends the
	// link: close both sides, which ends the other direction too.
	<-done
	p.untrack(client, upstream)
	<-done
}
