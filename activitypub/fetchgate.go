package activitypub

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ErrHostBusy is returned (wrapped) by a client whose transport is gated by
// a FetchGate when the host has a fetch in flight for longer than
// SlowAfter, or answered slowly within SlowFor, or has PerHost fetches in
// flight: the caller does not wait on it and uses what it has (a cached or
// embedded document) or comes back later.
var ErrHostBusy = errors.New("activitypub: host busy: a fetch from it is in flight or it answered slowly")

// BusyError is ErrHostBusy for one host, with how long it is likely to stay
// busy: the rest of its SlowFor when it answered slowly, else a few seconds.
type BusyError struct {
	// Host is the host refused.
	Host string
	// Wait is how long until a fetch from it may be admitted.
	Wait time.Duration
	// Why says what makes it busy.
	Why string
}

func (e *BusyError) Error() string { return fmt.Sprintf("%v: %s %s", ErrHostBusy, e.Host, e.Why) }

// Unwrap makes the error match ErrHostBusy.
func (e *BusyError) Unwrap() error { return ErrHostBusy }

// busyWait is the wait a BusyError of a host with fetches in flight
// carries: about how long one fetch takes.
const busyWait = 2 * time.Second

// FetchGateOptions configure NewFetchGate.
type FetchGateOptions struct {
	// PerHost bounds the fetches in flight to one host. Default 8.
	PerHost int
	// SlowAfter is how long a fetch may take before its host counts as
	// slow. Default 5 s.
	SlowAfter time.Duration
	// SlowFor is how long a host that answered slowly (or timed out) is
	// refused new fetches. Default 1 min.
	SlowFor time.Duration
	// MaxHold bounds how long a fetch counts as in flight (a caller that
	// never closes a response body must not close the host for good).
	// Default 2 min.
	MaxHold time.Duration
	// MaxHosts bounds the hosts remembered; when full, the memory is
	// cleared. Default 100,000.
	MaxHosts int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// FetchGate keeps fetches from waiting on a remote host that is slow or
// already being fetched, so that a remote whose documents take 25 s to
// come holds one or a few of the worker's handlers, not all of them: every
// other fetch from it fails at once with ErrHostBusy. It is safe for
// concurrent use.
type FetchGate struct {
	opts  FetchGateOptions
	mu    sync.Mutex
	hosts map[string]*gateHost
}

type gateHost struct {
	inFlight  map[uint64]time.Time // fetch -> start
	next      uint64
	slowUntil time.Time
}

// NewFetchGate returns a FetchGate.
func NewFetchGate(opts FetchGateOptions) *FetchGate {
	if opts.PerHost <= 0 {
		opts.PerHost = 8
	}
	if opts.SlowAfter <= 0 {
		opts.SlowAfter = 5 * time.Second
	}
	if opts.SlowFor <= 0 {
		opts.SlowFor = time.Minute
	}
	if opts.MaxHold <= 0 {
		opts.MaxHold = 2 * time.Minute
	}
	if opts.MaxHosts <= 0 {
		opts.MaxHosts = 100_000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &FetchGate{opts: opts, hosts: map[string]*gateHost{}}
}

// enter admits one fetch from host, or returns ErrHostBusy. leave ends it;
// slow reports a failure that says the host is slow (a timeout).
func (g *FetchGate) enter(host string) (leave func(slow bool), err error) {
	now := g.opts.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hosts[host]
	if h == nil {
		if len(g.hosts) >= g.opts.MaxHosts {
			clear(g.hosts)
		}
		h = &gateHost{inFlight: map[uint64]time.Time{}}
		g.hosts[host] = h
	}
	for id, start := range h.inFlight {
		switch age := now.Sub(start); {
		case age >= g.opts.MaxHold:
			delete(h.inFlight, id)
		case age >= g.opts.SlowAfter:
			return nil, &BusyError{Host: host, Wait: g.opts.SlowFor,
				Why: fmt.Sprintf("has a fetch in flight for %s", age.Round(time.Second))}
		}
	}
	if now.Before(h.slowUntil) {
		return nil, &BusyError{Host: host, Wait: h.slowUntil.Sub(now),
			Why: "answered slowly; not fetched again before " + h.slowUntil.UTC().Format(time.RFC3339)}
	}
	if len(h.inFlight) >= g.opts.PerHost {
		return nil, &BusyError{Host: host, Wait: busyWait, Why: fmt.Sprintf("has %d fetches in flight", len(h.inFlight))}
	}
	h.next++
	id := h.next
	h.inFlight[id] = now
	var once sync.Once
	return func(slow bool) {
		once.Do(func() {
			end := g.opts.Now()
			g.mu.Lock()
			defer g.mu.Unlock()
			delete(h.inFlight, id)
			if slow || end.Sub(now) >= g.opts.SlowAfter {
				h.slowUntil = end.Add(g.opts.SlowFor)
			} else if len(h.inFlight) == 0 {
				h.slowUntil = time.Time{}
			}
		})
	}, nil
}

// Wrap returns next gated: a request to a busy host fails with ErrHostBusy
// without being sent; a fetch lasts until its response body is read to the
// end or closed.
func (g *FetchGate) Wrap(next http.RoundTripper) http.RoundTripper {
	return &gated{gate: g, next: next}
}

type gated struct {
	gate *FetchGate
	next http.RoundTripper
}

func (t *gated) RoundTrip(r *http.Request) (*http.Response, error) {
	leave, err := t.gate.enter(r.URL.Host)
	if err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		var ne interface{ Timeout() bool }
		leave(errors.As(err, &ne) && ne.Timeout())
		return nil, err
	}
	resp.Body = &gatedBody{ReadCloser: resp.Body, leave: leave}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the wrapped transport.
func (t *gated) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type gatedBody struct {
	io.ReadCloser
	leave func(slow bool)
}

func (b *gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		var ne interface{ Timeout() bool }
		b.leave(errors.As(err, &ne) && ne.Timeout())
	}
	return n, err
}

func (b *gatedBody) Close() error {
	b.leave(false)
	return b.ReadCloser.Close()
}
