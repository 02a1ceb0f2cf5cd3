package chaos

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// cutDial bounds the proxy's connection to its target.
const cutDial = 10 * time.Second

// cutProxy is a TCP proxy on loopback in front of PostgreSQL for one
// client, for when the run cannot make a network namespace. Its cut works
// like a partition, not a close: from the cut on, no byte crosses in
// either direction and new connections are accepted but go nowhere; when
// the cut is lifted, the held connections carry on where they stopped.
type cutProxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cutCh chan struct{} // closed while the link is up; replaced by a cut
	conns map[net.Conn]bool
	done  chan struct{}
	wg    sync.WaitGroup
}

func newCutProxy(target string) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy: %w", err)
	}
	up := make(chan struct{})
	close(up)
	p := &cutProxy{target: target, ln: ln, cutCh: up, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is the proxy's host:port.
func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// cut stops every byte from crossing until restore.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.cutCh:
		p.cutCh = make(chan struct{})
	default: // already cut
	}
}

// restore lets bytes cross again.
func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.cutCh:
	default:
		close(p.cutCh)
	}
}

// gate returns once the link is up (true) or the proxy closed (false).
func (p *cutProxy) gate() bool {
	p.mu.Lock()
	up := p.cutCh
	p.mu.Unlock()
	select {
	case <-up:
		return true
	case <-p.done:
		return false
	}
}

func (p *cutProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.Close()
		return false
	default:
	}
	if add {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c, true) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve carries one client connection: it dials the target only once the
// link is up, then pumps both ways through the gate.
func (p *cutProxy) serve(c net.Conn) {
	defer func() {
		c.Close()
		p.track(c, false)
	}()
	if !p.gate() {
		return
	}
	t, err := net.DialTimeout("tcp", p.target, cutDial)
	if err != nil {
		return
	}
	if !p.track(t, true) {
		return
	}
	defer func() {
		t.Close()
		p.track(t, false)
	}()
	var pumps sync.WaitGroup
	pumps.Go(func() { p.pump(t, c); t.Close() })
	pumps.Go(func() { p.pump(c, t); c.Close() })
	pumps.Wait()
}

// pump copies src to dst, holding each chunk at the gate.
func (p *cutProxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or either side closed
		}
	}
}

// close stops the proxy and every connection through it, and waits.
func (p *cutProxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
