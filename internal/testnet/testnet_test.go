package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

// A Refusing address refuses connections and cannot be listened on while
// the test holds it.
func TestRefusing(t *testing.T) {
	addr := Refusing(t)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s connected", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listened on %s while it is held", addr)
	}
}

// A listener handed over as a file accepts as the same socket.
func TestFile(t *testing.T) {
	ln := Listen(t)
	f := File(t, ln)
	again, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Addr().String() != ln.Addr().String() {
		t.Fatalf("file listener on %s, want %s", again.Addr(), ln.Addr())
	}
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := again.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
