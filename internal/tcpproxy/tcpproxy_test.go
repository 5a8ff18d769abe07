package tcpproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends a line and reads it back.
func roundTrip(c net.Conn, line string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether reading c ends with EOF or a reset (not a
// timeout): the proxy closed it.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func TestForwardCutRestore(t *testing.T) {
	target := echo(t)
	p := newProxy(t, target.Addr().String())

	c1 := dial(t, p.Addr())
	if got, err := roundTrip(c1, "hello"); err != nil || got != "hello" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut false after Cut")
	}
	if !closedByPeer(c1) {
		t.Fatal("an existing link survived the cut")
	}
	c2 := dial(t, p.Addr()) // the port still accepts…
	if !closedByPeer(c2) {
		t.Fatal("a new link was forwarded while cut")
	}

	p.Restore()
	c3 := dial(t, p.Addr())
	if got, err := roundTrip(c3, "again"); err != nil || got != "again" {
		t.Fatalf("after restore: %q, %v", got, err)
	}
	fwd, refused, open := p.Stats()
	if fwd != 2 || refused != 1 || open != 2 {
		t.Fatalf("stats: %d forwarded, %d refused, %d open; want 2, 1, 2", fwd, refused, open)
	}
}

func TestTargetDown(t *testing.T) {
	target := echo(t)
	addr := target.Addr().String()
	target.Close()
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	if !closedByPeer(c) {
		t.Fatal("a link to a dead target stayed open")
	}
}

func TestTargetClosesLink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
	}()
	p := newProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	if !closedByPeer(c) {
		t.Fatal("the client side stayed open after the target closed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, open := p.Stats(); open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sockets still tracked after the link ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBlackHole(t *testing.T) {
	p := newProxy(t, "")
	p.Restore() // no target: stays cut
	c := dial(t, p.Addr())
	if !closedByPeer(c) {
		t.Fatal("a black hole forwarded a link")
	}
}

func TestCloseEndsLinks(t *testing.T) {
	target := echo(t)
	p, err := New("127.0.0.1:0", target.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !closedByPeer(c) {
		t.Fatal("a link survived Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the port still accepts after Close")
	}
}
