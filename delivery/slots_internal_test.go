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

// A lone second delivery to a host waits for the POST in flight (and so
// reuses its connection) instead of starting beside it on a new one.
func TestSlotsSecondDeliveryWaitsForThePostInFlight(t *testing.T) {
	s := newSlotSet()
	const host = "a.example"
	r1, ok := s.acquire(context.Background(), host, 4, time.Minute)
	if !ok {
		t.Fatal("first acquire failed")
	}
	second := acquireAsync(s, host, 4, time.Minute)
	waitQueued(t, s, host, 1)
	select {
	case r := <-second:
		t.Fatalf("the second delivery started beside the first (ok=%v)", r.ok)
	default:
	}
	if n := s.inUseOf(host); n != 1 {
		t.Fatalf("in use %d, want 1", n)
	}
	r1()
	r := <-second
	if !r.ok {
		t.Fatal("the second delivery got no slot once the first ended")
	}
	if n := s.inUseOf(host); n != 1 {
		t.Fatalf("in use %d, want 1", n)
	}
	waitQueued(t, s, host, 0)
	r.release()
	if n := s.inUseOf(host); n != 0 {
		t.Fatalf("in use %d after every release, want 0", n)
	}
}

// When a host's deliveries queue, its concurrency ramps up to the limit;
// once it had two POSTs in flight, two start without waiting.
func TestSlotsRampUpWhenDeliveriesQueue(t *testing.T) {
	s := newSlotSet()
	const host = "b.example"
	r1, _ := s.acquire(context.Background(), host, 2, time.Minute)
	second := acquireAsync(s, host, 2, time.Minute)
	waitQueued(t, s, host, 1)
	// A third delivery finds one waiting: the host's queue grows, so it
	// starts a second POST.
	r3, ok := s.acquire(context.Background(), host, 2, 10*time.Second)
	if !ok {
		t.Fatal("a delivery behind a queue got no second slot")
	}
	if n := s.inUseOf(host); n != 2 {
		t.Fatalf("in use %d, want 2", n)
	}
	// The limit holds: a fourth waits, and gives up when its wait ends.
	if _, ok := s.acquire(context.Background(), host, 2, 10*time.Millisecond); ok {
		t.Fatal("a delivery got a slot beyond the limit")
	}
	r1()
	r := <-second
	if !r.ok {
		t.Fatal("the waiting delivery got no slot")
	}
	r3()
	// The host had two POSTs in flight before (two connections): with one
	// in flight and no one waiting, a second starts at once.
	a, okA := s.acquire(context.Background(), host, 2, 10*time.Second)
	done := acquireAsync(s, host, 2, time.Minute)
	r.release()
	b := <-done
	if !okA || !b.ok {
		t.Fatal("a host that had two connections got fewer slots")
	}
	a()
	b.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) != 0 || len(s.waiting) != 0 {
		t.Fatalf("state left behind: in use %v, waiting %v", s.inUse, s.waiting)
	}
}

// With no wait (a failing or unknown host, limit 1) a busy host's delivery
// returns at once and leaves no waiter behind.
func TestSlotsNoWaitWhenBusy(t *testing.T) {
	s := newSlotSet()
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
