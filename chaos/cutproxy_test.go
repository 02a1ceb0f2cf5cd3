package chaos

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// echoServer answers every line with the same line, on loopback.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestCutProxyHoldsBytesUntilRestore: through the proxy a line comes back;
// during a cut nothing comes back on an open connection nor on a new one,
// and after the restore both get their answers, nothing lost.
func TestCutProxyHoldsBytesUntilRestore(t *testing.T) {
	t.Parallel()
	p, err := newCutProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	roundTrip := func(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
		if _, err := io.WriteString(c, line+"\n"); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		got, err := r.ReadString('\n')
		return got, err
	}
	c1, r1 := dial()
	if got, err := roundTrip(c1, r1, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}

	p.cut()
	// Bounded waits that must run out: nothing crosses the cut.
	if got, err := roundTrip(c1, r1, "two", time.Second); err == nil {
		t.Fatalf("an open connection got %q through the cut", got)
	}
	c2, r2 := dial()
	if got, err := roundTrip(c2, r2, "three", time.Second); err == nil {
		t.Fatalf("a new connection got %q through the cut", got)
	}

	p.restore()
	for _, c := range []struct {
		conn net.Conn
		r    *bufio.Reader
		want string
	}{{c1, r1, "two\n"}, {c2, r2, "three\n"}} {
		c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := c.r.ReadString('\n'); err != nil || got != c.want {
			t.Fatalf("after the restore: %q, %v; want %q", got, err, c.want)
		}
	}

	// close ends the connections through it.
	p.close()
	c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r1.ReadString('\n'); err == nil {
		t.Fatal("a connection outlived the proxy")
	}
}

// TestFrontSkipsADownServerAndKeepsHost: requests reach the servers in
// turn with the client's Host; with one down, all go to the other; with
// none up, 503.
func TestFrontSkipsADownServerAndKeepsHost(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 16)
	backend := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits <- name + " " + r.Host
			w.WriteHeader(http.StatusAccepted)
		}))
	}
	a, b := backend("a"), backend("b")
	defer a.Close()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	f, err := newFront(listen, []string{host(t, a.URL), host(t, b.URL)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	get := func() int {
		resp, err := http.Get("http://" + listen + "/inbox")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	seen := map[string]bool{}
	for range 2 {
		if code := get(); code != http.StatusAccepted {
			t.Fatalf("status %d", code)
		}
		seen[<-hits] = true
	}
	if !seen["a "+listen] || !seen["b "+listen] {
		t.Fatalf("hits %v: want both servers, with the front's Host", seen)
	}
	b.Close()
	for range 3 {
		if code := get(); code != http.StatusAccepted {
			t.Fatalf("one server down: status %d", code)
		}
		if h := <-hits; h != "a "+listen {
			t.Fatalf("one server down: hit %q", h)
		}
	}
	a.Close()
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("no server up: status %d, want 503", code)
	}
}

func host(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
