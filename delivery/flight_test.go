package delivery_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// hungHost accepts connections and never answers, until released; it
// counts the connections it accepted.
type hungHost struct {
	ln    net.Listener
	conns atomic.Int64
	mu    sync.Mutex
	open  []net.Conn
	wg    sync.WaitGroup
}

func newHungHost(t *testing.T) *hungHost {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungHost{ln: ln}
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.conns.Add(1)
			h.mu.Lock()
			h.open = append(h.open, c)
			h.mu.Unlock()
			h.wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() { h.hangUp(); h.wg.Wait() })
	return h
}

func (h *hungHost) addr() string { return h.ln.Addr().String() }

// hangUp closes the listener and every connection: the POSTs in the air
// fail.
func (h *hungHost) hangUp() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.open {
		c.Close()
	}
	h.open = nil
}

// Hosts that accept connections and never answer hold none of the worker's
// handler slots: with two handler slots and six hung hosts, a healthy
// host's deliveries all go out while every hung host's first POST is still
// in the air; each hung host gets one request (its probe) and its other
// deliveries wait without spending attempts. When the hung POSTs fail,
// their outcome is applied from the flight, with no second POST.
func TestHungHostsHoldNoHandlerSlots(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) {
		c.Timeout = time.Minute // no flight to a hung host ends by itself during the test
	})
	alice := b.actor("alice")
	var hung []*hungHost
	for i := range 6 {
		h := newHungHost(t)
		hung = append(hung, h)
		for j := range 3 {
			u := fmt.Sprintf("http://%s/users/h%d-%d", h.addr(), i, j)
			b.follower(alice, u, u+"/inbox", "")
		}
	}
	healthy := newRemote(t, b.keys, b.clock, false)
	for j := range 5 {
		healthy.follow(b, alice, fmt.Sprintf("ok%d", j))
	}
	b.note(alice, "hello")
	b.startWorker(2)

	// Ticking: a healthy delivery that finds the host's four slots taken
	// is deferred for a moment of the test clock.
	b.waitTicking("the healthy host's five deliveries", func() bool { return healthy.count() == 5 })
	waitFor(t, "a probe in the air to every hung host", func() bool {
		for _, h := range hung {
			if h.conns.Load() < 1 {
				return false
			}
		}
		return true
	})
	waitFor(t, "every hung host's probe handed off by its handler", func() bool {
		inFlight, handed := b.svc.InFlight()
		return inFlight >= len(hung) && handed >= len(hung)
	})
	for _, h := range hung {
		if n := h.conns.Load(); n != 1 {
			t.Errorf("hung host %s: %d connections, want 1 (one probe)", h.addr(), n)
		}
	}
	waitFor(t, "every hung host's other deliveries waiting", func() bool {
		waiting := 0
		for _, r := range b.rows(delivery.EventPost) {
			if r.Status == outbox.StatusPending && r.Attempts == 0 && r.NextAttemptAt.After(b.clock.Now()) {
				waiting++
			}
		}
		return waiting == 3*len(hung)
	})

	for _, h := range hung {
		h.hangUp()
	}
	waitFor(t, "the probes' failures applied to their rows", func() bool {
		failed := 0
		for _, r := range b.rows(delivery.EventPost) {
			if r.Attempts == 1 && r.Status == outbox.StatusPending {
				failed++
			}
		}
		return failed == len(hung)
	})
	for _, h := range hung {
		if n := h.conns.Load(); n != 1 {
			t.Errorf("hung host %s: %d connections after its probe failed, want 1 (no second POST)", h.addr(), n)
		}
		// Host health is written in the background after the flight lands.
		waitFor(t, "hung host "+h.addr()+" recorded failing", func() bool {
			st, err := b.svc.Health().Host(b.ctx, h.addr())
			return err == nil && st.State == delivery.HostFailing
		})
	}
	for _, r := range b.rows(delivery.EventPost) {
		if r.Attempts > 1 {
			t.Errorf("row %s spent %d attempts", r.Event.ID, r.Attempts)
		}
	}
}

// A slow host (answering after longer than HandOff) is served at its own
// pace: every delivery to it arrives exactly once, none spends an attempt,
// and a fast host's deliveries do not wait for it.
func TestSlowHostServedOnceAtItsPace(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.Config) { c.HandOff = 50 * time.Millisecond })
	alice := b.actor("alice")
	slow := newRemote(t, b.keys, b.clock, false)
	gate := make(chan struct{})
	slow.setRespond(func(*http.Request) (int, http.Header) {
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
		}
		return http.StatusAccepted, nil
	})
	fast := newRemote(t, b.keys, b.clock, false)
	for j := range 4 {
		slow.follow(b, alice, fmt.Sprintf("s%d", j))
		fast.follow(b, alice, fmt.Sprintf("f%d", j))
	}
	b.note(alice, "slowly")
	b.startWorker(1)
	waitFor(t, "the fast host's deliveries while the slow host holds its answer", func() bool { return fast.count() == 4 })
	close(gate)
	b.waitTicking("every delivery done", func() bool {
		rows := b.rows(delivery.EventPost)
		for _, r := range rows {
			if r.Status != outbox.StatusDone {
				return false
			}
		}
		return len(rows) == 8
	})
	seen := map[string]int{}
	for _, r := range slow.received() {
		seen[r.Path]++
	}
	for path, n := range seen {
		if n != 1 {
			t.Errorf("%s received %d POSTs, want 1", path, n)
		}
	}
	if len(seen) != 4 {
		t.Errorf("slow host received %d inboxes' deliveries, want 4", len(seen))
	}
	for _, r := range b.rows(delivery.EventPost) {
		if r.Attempts != 0 {
			var p delivery.Post
			_ = json.Unmarshal(r.Event.Payload, &p)
			t.Errorf("delivery to %s spent %d attempts", p.Inbox, r.Attempts)
		}
	}
}
