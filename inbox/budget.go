package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/limit"
)

// ErrThrottled: the sender's host has spent its inbound budget; the request
// is answered 429 with Retry-After (see *ThrottledError).
var ErrThrottled = errors.New("inbox: remote host over its inbound budget")

// ThrottledError is ErrThrottled for one host, with the wait its answer's
// Retry-After carries.
type ThrottledError struct {
	// Host is the sender's host (the key id's, with its port if any).
	Host string
	// Wait is how long until the host may send again.
	Wait time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("inbox: %s is over its inbound budget; retry in %ss", e.Host, limit.RetryAfter(e.Wait))
}

// Unwrap makes the error match ErrThrottled.
func (e *ThrottledError) Unwrap() error { return ErrThrottled }

// RetryAfter is the wait the answer's Retry-After carries (httpedge.Retrier).
func (e *ThrottledError) RetryAfter() time.Duration { return e.Wait }

// resultThrottled: a request refused with 429 because its host is over its
// budget (label result of courier_inbox_requests_total).
const resultThrottled = "throttled"

// maxBudgetHosts bounds the per-host figures kept for the admin view; the
// buckets themselves are bounded by limit.DefaultMaxKeys.
const maxBudgetHosts = 10000

// budgets holds the per-remote-host inbound budgets: requests and body
// bytes per minute, each a token bucket holding one minute's worth. A
// request is refused (429) before its body is read when its host's bucket
// of requests or of bytes is empty; a request is charged only once its
// signature verified, so no one can spend another host's budget. The
// fetches of a request's key (and their bytes) are charged before they are
// made, verified or not, to the key host's key-fetch budget (as large, and
// apart), refused with 429 when it is spent.
type budgets struct {
	requests, bytes float64            // per minute, the default budget
	factors         map[string]float64 // host -> multiple of the default
	now             func() time.Time
	log             *slog.Logger

	defaults hostBuckets
	special  map[string]hostBuckets // hosts with a factor of their own
	warned   *limit.Keyed           // one warning per host per minute

	mu    sync.Mutex
	hosts map[string]*HostBudget
}

type hostBuckets struct{ requests, bytes *limit.Keyed }

func newHostBuckets(requests, bytes float64, now func() time.Time) hostBuckets {
	return hostBuckets{
		requests: limit.New(limit.Config{Rate: requests / 60, Burst: requests, Now: now}),
		bytes:    limit.New(limit.Config{Rate: bytes / 60, Burst: bytes, Now: now}),
	}
}

func newBudgets(cfg Config) *budgets {
	b := &budgets{
		requests: cfg.HostRequestsPerMinute, bytes: float64(cfg.HostBytesPerMinute),
		factors: cfg.HostBudgetFactors, now: cfg.Now, log: cfg.Logger,
		special: map[string]hostBuckets{}, hosts: map[string]*HostBudget{},
		warned: limit.New(limit.Config{Rate: 1.0 / 60, Burst: 1, Now: cfg.Now}),
	}
	b.defaults = newHostBuckets(b.requests, b.bytes, cfg.Now)
	for host, f := range cfg.HostBudgetFactors {
		b.special[host] = newHostBuckets(b.requests*f, b.bytes*f, cfg.Now)
	}
	return b
}

func (b *budgets) of(host string) (hostBuckets, float64) {
	if hb, ok := b.special[host]; ok {
		return hb, b.factors[host]
	}
	return b.defaults, 1
}

// admit refuses a request from host when host has spent its requests or
// its bytes.
func (b *budgets) admit(ctx context.Context, host string) error {
	if host == "" {
		return nil
	}
	hb, _ := b.of(host)
	wait := max(hb.requests.Wait(host), hb.bytes.Wait(host))
	if wait == 0 {
		return nil
	}
	b.mu.Lock()
	if s := b.stats(host); s != nil {
		s.Throttled++
		s.LastThrottledAt = b.now().UTC()
	}
	b.mu.Unlock()
	if ok, _ := b.warned.Take(host, 1); ok {
		b.log.WarnContext(ctx, "inbox: a remote host is over its inbound budget; its requests get 429 until it slows down",
			"host", host, "retry_after", limit.RetryAfter(wait)+"s",
			"requests_per_minute", b.requests, "bytes_per_minute", b.bytes)
	}
	return &ThrottledError{Host: host, Wait: wait}
}

// charge spends one request and n body bytes of host's budget, after the
// request verified.
func (b *budgets) charge(host string, n int) {
	if host == "" {
		return
	}
	hb, _ := b.of(host)
	hb.requests.Charge(host, 1)
	hb.bytes.Charge(host, float64(n))
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.stats(host); s != nil {
		s.Requests++
		s.Bytes += int64(n)
	}
}

// spendFetch takes one request of host's key-fetch budget for a fetch of a
// key of host, before it is made, or refuses it (*ThrottledError) when that
// budget is spent. The key-fetch budget is as large as the request budget
// and apart from it: requests naming ever new keys of a host spend it and
// get 429, while the requests of keys courier holds go on.
func (b *budgets) spendFetch(ctx context.Context, host string) error {
	if host == "" {
		return nil
	}
	hb, _ := b.of(host)
	key := fetchBudgetKey(host)
	if wait := max(hb.requests.Wait(key), hb.bytes.Wait(key)); wait > 0 {
		b.mu.Lock()
		if s := b.stats(host); s != nil {
			s.Throttled++
			s.LastThrottledAt = b.now().UTC()
		}
		b.mu.Unlock()
		if ok, _ := b.warned.Take(key, 1); ok {
			b.log.WarnContext(ctx, "inbox: a remote host's requests need more key fetches than its budget; they get 429 until it slows down",
				"host", host, "retry_after", limit.RetryAfter(wait)+"s")
		}
		return &ThrottledError{Host: host, Wait: wait}
	}
	hb.requests.Charge(key, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.stats(host); s != nil {
		s.KeyFetches++
	}
	return nil
}

// chargeFetched charges n bytes read by a fetch of a key of host to its
// key-fetch budget.
func (b *budgets) chargeFetched(host string, n int) {
	if host == "" {
		return
	}
	hb, _ := b.of(host)
	hb.bytes.Charge(fetchBudgetKey(host), float64(n))
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.stats(host); s != nil {
		s.KeyFetchBytes += int64(n)
	}
}

// fetchBudgetKey is the bucket key of host's key-fetch budget.
func fetchBudgetKey(host string) string { return "key fetches\x00" + host }

// ignored counts a verified request of host that concerned no one here.
func (b *budgets) ignored(host string) {
	if host == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.stats(host); s != nil {
		s.Ignored++
	}
}

// deferred counts a request of host answered 503 for a temporary
// condition on courier's side.
func (b *budgets) deferred(host string) {
	if host == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.stats(host); s != nil {
		s.Deferred++
		s.LastDeferredAt = b.now().UTC()
	}
}

// stats returns host's figures, nil when the table is full; the caller
// holds b.mu.
func (b *budgets) stats(host string) *HostBudget {
	s, ok := b.hosts[host]
	if !ok {
		if len(b.hosts) >= maxBudgetHosts {
			return nil
		}
		s = &HostBudget{Host: host}
		b.hosts[host] = s
	}
	return s
}

// HostBudget is what one remote host sent since the process started and
// its budget.
type HostBudget struct {
	// Host is the sender's host, as key ids name it (with a port, if any).
	Host string `json:"host"`
	// Requests and Bytes are its verified requests and their body bytes.
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
	// KeyFetches and KeyFetchBytes are the fetches courier made to
	// resolve the keys of its requests, and the bytes they read, charged
	// to its budget before the signatures were checked.
	KeyFetches    int64 `json:"key_fetches"`
	KeyFetchBytes int64 `json:"key_fetch_bytes"`
	// Ignored is how many of them concerned no one here: answered 202,
	// counted, not stored.
	Ignored int64 `json:"ignored"`
	// Throttled is how many requests were refused with 429, and
	// LastThrottledAt when the last one was.
	Throttled       int64     `json:"throttled"`
	LastThrottledAt time.Time `json:"last_throttled_at,omitzero"`
	// Deferred is how many requests were answered 503 with Retry-After
	// because courier could not verify or store them then (its fetch of
	// the key was busy or failed for a while, the database was busy), and
	// LastDeferredAt when the last one was.
	Deferred       int64     `json:"deferred"`
	LastDeferredAt time.Time `json:"last_deferred_at,omitzero"`
	// RequestsPerMinute and BytesPerMinute are its budget.
	RequestsPerMinute float64 `json:"requests_per_minute"`
	BytesPerMinute    float64 `json:"bytes_per_minute"`
}

// HostBudgets returns every remote host's figures, the most throttled
// first, then the busiest.
func (h *Handler) HostBudgets() []HostBudget {
	b := h.budgets
	b.mu.Lock()
	out := make([]HostBudget, 0, len(b.hosts))
	for _, s := range b.hosts {
		out = append(out, *s)
	}
	b.mu.Unlock()
	for i := range out {
		_, f := b.of(out[i].Host)
		out[i].RequestsPerMinute, out[i].BytesPerMinute = b.requests*f, b.bytes*f
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Throttled != out[j].Throttled {
			return out[i].Throttled > out[j].Throttled
		}
		if out[i].Deferred != out[j].Deferred {
			return out[i].Deferred > out[j].Deferred
		}
		if out[i].Requests != out[j].Requests {
			return out[i].Requests > out[j].Requests
		}
		return out[i].Host < out[j].Host
	})
	return out
}

// keyHost returns the host of keyID in one spelling per server, or "": a
// name in lower case without a trailing dot, an address in netip's
// canonical form (an IPv4-mapped IPv6 address as IPv4, IPv6 compressed and
// bracketed), and the port as an integer, left out when it is the
// scheme's default. Budgets are kept per keyHost, so a server named in
// several spellings ([::0:1], [0:0:0:0:0:0:0:1], port 0443) has one.
func keyHost(keyID string) string {
	u, err := url.Parse(keyID)
	if err != nil || u.Host == "" {
		return ""
	}
	name := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(name); err == nil {
		name = a.Unmap().WithZone("").String()
	}
	if strings.Contains(name, ":") {
		name = "[" + name + "]"
	}
	port := u.Port()
	if port == "" {
		return name
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return strings.ToLower(u.Host) // not a port: as written
	}
	if (p == 443 && u.Scheme == "https") || (p == 80 && u.Scheme == "http") {
		return name
	}
	return name + ":" + strconv.FormatUint(p, 10)
}

// requestHost returns the host of the key id of the request's signature,
// or "" when it has none that parses.
func requestHost(sig *activitypub.SignatureParams, err error) string {
	if err != nil || sig == nil {
		return ""
	}
	return keyHost(sig.KeyID)
}
