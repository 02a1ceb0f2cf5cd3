package limit_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/limit"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestTakeRefillsAtRate(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	k := limit.New(limit.Config{Rate: 2, Burst: 4, Now: c.Now})
	for i := range 4 {
		if ok, _ := k.Take("a", 1); !ok {
			t.Fatalf("take %d of a full bucket of 4 refused", i+1)
		}
	}
	ok, wait := k.Take("a", 1)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("empty bucket: ok=%v wait=%s, want refused for 500ms", ok, wait)
	}
	if ok, _ := k.Take("b", 1); !ok {
		t.Fatal("another key shares the bucket")
	}
	c.Add(500 * time.Millisecond)
	if ok, _ := k.Take("a", 1); !ok {
		t.Fatal("a token regained after 1/rate is refused")
	}
	if ok, wait := k.Take("a", 10); ok || wait != 2*time.Second {
		t.Fatalf("more than the burst: ok=%v wait=%s, want refused until full (2s)", ok, wait)
	}
}

func TestChargeRunsIntoDebtAndWaitSeesIt(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	k := limit.New(limit.Config{Rate: 1, Burst: 3, Now: c.Now})
	if w := k.Wait("x"); w != 0 {
		t.Fatalf("unknown key waits %s", w)
	}
	k.Charge("x", 100) // debt capped at one burst: -3
	if w := k.Wait("x"); w != 4*time.Second {
		t.Fatalf("after a charge beyond the burst: wait %s, want 4s (from -3 to 1)", w)
	}
	c.Add(4 * time.Second)
	if w := k.Wait("x"); w != 0 {
		t.Fatalf("after the debt is paid: wait %s", w)
	}
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	k := limit.New(limit.Config{Rate: 1, Burst: 2, MaxKeys: 100, Now: c.Now})
	for i := range 1000 {
		k.Charge(strconv.Itoa(i), 1)
		if n := k.Len(); n > 100 {
			t.Fatalf("%d buckets held, at most 100", n)
		}
	}
	// Refilled buckets make room before anything else is dropped.
	c.Add(time.Minute)
	k.Charge("fresh", 2)
	if n := k.Len(); n != 1 {
		t.Fatalf("%d buckets after the rest refilled, want only the fresh one", n)
	}
	if w := k.Wait("fresh"); w != time.Second {
		t.Fatalf("fresh: wait %s, want 1s", w)
	}
}

func TestFailuresThrottlePerClient(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1e9, 0)}
	f := limit.NewFailures(c.Now)
	for i := range limit.DefaultFailureBurst {
		if w := f.Wait("192.0.2.7:4000"); w != 0 {
			t.Fatalf("attempt %d refused (wait %s) within the burst", i+1, w)
		}
		f.Failed("192.0.2.7:4000")
	}
	w := f.Wait("192.0.2.7:5123") // another port, the same client
	if w != 6*time.Second {
		t.Fatalf("after %d failures: wait %s, want 6s", limit.DefaultFailureBurst, w)
	}
	if got := limit.RetryAfter(w); got != "6" {
		t.Fatalf("Retry-After %q", got)
	}
	if w := f.Wait("192.0.2.8:4000"); w != 0 {
		t.Fatalf("another client is throttled too: %s", w)
	}
	c.Add(6 * time.Second)
	if w := f.Wait("192.0.2.7:4000"); w != 0 {
		t.Fatalf("after one refill interval: wait %s", w)
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.1:80":               "192.0.2.1",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:1":   "2001:db8:1:2::/64",
		"[::ffff:192.0.2.1]:80":      "192.0.2.1",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"not an address":             "not an address",
		"198.51.100.3":               "198.51.100.3",
	} {
		if got := limit.ClientKey(in); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", in, got, want)
		}
	}
	if got := limit.RetryAfter(1500 * time.Millisecond); got != "2" {
		t.Errorf("RetryAfter(1.5s) = %q", got)
	}
	if got := limit.RetryAfter(0); got != "1" {
		t.Errorf("RetryAfter(0) = %q", got)
	}
}
