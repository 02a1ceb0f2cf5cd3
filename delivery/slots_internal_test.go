package delivery

import (
	"context"
	"testing"
	"time"
)

// slotResult is what a delivery's acquire returned.
type slotResult struct {
	release func()
	ok      bool
}

// acquireAsync starts an acquire of host and returns its result channel.
func acquireAsync(s *slotSet, host string, limit int, wait time.Duration) chan slotResult {
	ch := make(chan slotResult, 1)
	go func() {
		r, ok := s.acquire(context.Background(), host, limit, wait)
		ch <- slotResult{r, ok}
	}()
	return ch
}

// waitQueued polls until n deliveries wait for host.
func waitQueued(t *testing.T, s *slotSet, host string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		got := s.waiting[host]
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries wait for %s, want %d", got, host, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *slotSet) inUseOf(host string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse[host]
}

// A second delivery to a host waits for the POST in flight (and so reuses
// its connection) instead of starting beside it on a new one, until it has
// waited rampAfter.
func TestSlotsSecondDeliveryWaitsForThePostInFlight(t *testing.T) {
	s := newSlotSet(time.Hour)
	const host = "a.example"
	r1, ok := s.acquire(context.Background(), host, 4, time.Minute)
	if !ok {
		t.Fatal("first acquire failed")
	}
	second := acquireAsync(s, host, 4, 2*time.Hour)
	third := acquireAsync(s, host, 4, 2*time.Hour)
	waitQueued(t, s, host, 2)
	select {
	case r := <-second:
		t.Fatalf("a delivery started beside the first (ok=%v)", r.ok)
	case r := <-third:
		t.Fatalf("a delivery started beside the first (ok=%v)", r.ok)
	default:
	}
	if n := s.inUseOf(host); n != 1 {
		t.Fatalf("in use %d, want 1", n)
	}
	// Each POST's end lets one waiting delivery go, over its connection.
	r1()
	var got slotResult
	select {
	case got = <-second:
	case got = <-third:
	}
	if !got.ok {
		t.Fatal("no waiting delivery got the slot once the first ended")
	}
	waitQueued(t, s, host, 1)
	if n := s.inUseOf(host); n != 1 {
		t.Fatalf("in use %d, want 1", n)
	}
	got.release()
	select {
	case got = <-second:
	case got = <-third:
	}
	if !got.ok {
		t.Fatal("the last waiting delivery got no slot")
	}
	got.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) != 0 || len(s.waiting) != 0 {
		t.Fatalf("state left behind: in use %v, waiting %v", s.inUse, s.waiting)
	}
}

// A delivery that has waited rampAfter starts a POST beside those in
// flight, up to the limit; once the host had two in flight, two start
// without waiting.
func TestSlotsRampUpWhenDeliveriesQueue(t *testing.T) {
	s := newSlotSet(time.Millisecond)
	const host = "b.example"
	r1, _ := s.acquire(context.Background(), host, 2, time.Minute)
	r2, ok := s.acquire(context.Background(), host, 2, time.Minute)
	if !ok {
		t.Fatal("a delivery that waited got no second slot")
	}
	if n := s.inUseOf(host); n != 2 {
		t.Fatalf("in use %d, want 2", n)
	}
	// The limit holds: a third waits, and gives up when its wait ends.
	if _, ok := s.acquire(context.Background(), host, 2, 50*time.Millisecond); ok {
		t.Fatal("a delivery got a slot beyond the limit")
	}
	r1()
	r2()
	// The host had two POSTs in flight before (two connections): with one
	// in flight, a second starts at once even with no ramp.
	s.rampAfter = time.Hour
	a, okA := s.acquire(context.Background(), host, 2, time.Minute)
	b, okB := s.acquire(context.Background(), host, 2, time.Minute)
	if !okA || !okB {
		t.Fatal("a host that had two connections got fewer slots")
	}
	a()
	b()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) != 0 || len(s.waiting) != 0 {
		t.Fatalf("state left behind: in use %v, waiting %v", s.inUse, s.waiting)
	}
}

// A host whose newest POST in flight has gone unanswered for rampAfter
// gets a POST beside it at once: waiting for a slow answer is no use.
func TestSlotsRampBesideASlowPost(t *testing.T) {
	s := newSlotSet(time.Hour)
	const host = "d.example"
	r1, _ := s.acquire(context.Background(), host, 2, time.Minute)
	s.mu.Lock()
	s.newest[host] = time.Now().Add(-2 * time.Hour) // in flight for two hours
	s.mu.Unlock()
	r2, ok := s.acquire(context.Background(), host, 2, time.Minute)
	if !ok {
		t.Fatal("no POST beside one unanswered for longer than rampAfter")
	}
	// The second POST is young: a third waits for one of them (and here
	// gives up, the limit reached).
	if _, ok := s.acquire(context.Background(), host, 2, 10*time.Millisecond); ok {
		t.Fatal("a delivery got a slot beyond the limit")
	}
	r1()
	r2()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) != 0 || len(s.newest) != 0 || len(s.waiting) != 0 {
		t.Fatalf("state left behind: in use %v, newest %v, waiting %v", s.inUse, s.newest, s.waiting)
	}
}

// With no wait (a failing or unknown host, limit 1) a busy host's delivery
// returns at once and leaves no waiter behind.
func TestSlotsNoWaitWhenBusy(t *testing.T) {
	s := newSlotSet(time.Millisecond)
	const host = "c.example"
	r1, ok := s.acquire(context.Background(), host, 1, 0)
	if !ok {
		t.Fatal("first acquire failed")
	}
	if _, ok := s.acquire(context.Background(), host, 1, 0); ok {
		t.Fatal("a second slot of a host limited to one")
	}
	r1()
	if _, ok := s.acquire(context.Background(), host, 1, 0); !ok {
		t.Fatal("no slot after the release")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) != 0 {
		t.Fatalf("waiters left: %v", s.waiting)
	}
}
