//go:build unix

package e2e

import (
	"syscall"
	"testing"
)

// refusingPort returns a port on 127.0.0.1 that is bound but not listening
// until the test ends: connecting to it is refused at once, and nobody else
// can take it. It is every node's advertised cluster address, so no node
// learns a direct route to another (a route learned by gossip would bypass
// the proxies and survive a partition). A port that accepted and closed
// connections would not do: nats-server retries a failed gossiped route
// forever, about every 50 ms; a refused one it gives up.
func refusingPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}
