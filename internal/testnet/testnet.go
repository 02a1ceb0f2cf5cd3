// Package testnet gives tests loopback addresses that stay theirs for as
// long as the test runs.
//
// A test never takes a port by opening a listener, closing it and handing
// the number on: on a busy machine anything may take the port in between.
// Instead it keeps what it opened: Listen is a listener to pass to the
// server under test (or to a child process, see File), Refusing an address
// that refuses every connection and that nothing else can bind.
package testnet

import (
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
)

// Listen opens a TCP listener on a free loopback port, closed when the
// test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// File is a duplicate of ln's socket for a child process
// (exec.Cmd.ExtraFiles); the child makes it a listener again with
// net.FileListener. The duplicate is closed when the test ends.
func File(t testing.TB, ln net.Listener) *os.File {
	t.Helper()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Refusing is a loopback address ("127.0.0.1:port") where nothing listens
// and nothing can start to while the test runs: a TCP socket is bound to
// the port and never listens, so every connection is refused at once, and
// (the socket holding the port without SO_REUSEADDR) no other socket can
// bind it. It is closed when the test ends.
func Refusing(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
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
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// Gate is a loopback address the test holds from first to last for a
// server that picks its own port (one that cannot be handed a listener):
// until Open, it hangs up on every connection; after Open(addr), it
// carries each new connection to addr.
type Gate struct {
	ln net.Listener
	to atomic.Pointer[string]
}

// NewGate opens a Gate, closed when the test ends.
func NewGate(t testing.TB) *Gate {
	t.Helper()
	g := &Gate{ln: Listen(t)}
	go func() {
		for {
			c, err := g.ln.Accept()
			if err != nil {
				return
			}
			to := g.to.Load()
			if to == nil {
				c.Close()
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", *to)
				if err != nil {
					return
				}
				defer up.Close()
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return g
}

// Addr is the gate's address.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// Open carries the connections that come from now on to addr.
func (g *Gate) Open(addr string) { g.to.Store(&addr) }
