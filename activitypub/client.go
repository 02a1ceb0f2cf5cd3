package activitypub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// ErrPrivateAddress is returned (wrapped in *url.Error and *net.OpError,
// matchable with errors.Is) when a connection to a non-global address is
// refused.
var ErrPrivateAddress = errors.New("activitypub: refusing non-global address")

// DefaultUserAgent is the User-Agent courier sends unless told otherwise.
const DefaultUserAgent = "courier (+https://github.com/courier-ap/courier)"

// ClientOptions configure NewClient.
type ClientOptions struct {
	// AllowPrivate allows connections to loopback, private, link-local and
	// other non-global addresses (COURIER_ALLOW_PRIVATE_ADDRESSES; tests on
	// 127.0.0.1 need it). Default false.
	AllowPrivate bool
	// DenyMetadata, with AllowPrivate, still refuses link-local and cloud
	// metadata addresses (MetadataAddr) but those AllowAddrs contains: a
	// client to the operator's own services on a private network (webhooks)
	// that no endpoint can turn to the host's metadata service. Default
	// false.
	DenyMetadata bool
	AllowAddrs   []netip.Prefix
	// Timeout bounds a whole request, body included. Default 30 s.
	Timeout time.Duration
	// DialTimeout bounds connecting. Default 5 s.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake. Default 5 s.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers after the
	// request is written. Default 20 s.
	ResponseHeaderTimeout time.Duration
	// MaxConnsPerHost bounds connections per host, and the idle
	// connections kept per host. Default 8.
	MaxConnsPerHost int
	// IdleConnTimeout is how long an idle connection is kept. Default 90 s.
	IdleConnTimeout time.Duration
	// TLSSessionCacheSize is how many TLS sessions are kept so that a new
	// connection to a host resumes instead of a full handshake. Default
	// 8192.
	TLSSessionCacheSize int
	// RootCAs are the certificate authorities trusted for HTTPS. Default
	// nil: the system's.
	RootCAs *x509.CertPool
	// UserAgent is set on requests that have none. Default DefaultUserAgent.
	UserAgent string
	// LookupHost, when set, resolves a host name to the addresses dialed
	// instead of the system's resolver (the guard still checks the address
	// dialed): tests reach hosts by name on loopback through it. Default
	// nil: the system's resolver.
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Gate, when set, keeps requests from waiting on a host that is slow
	// or already busy (see FetchGate): give it to the client of remote
	// fetches. Default nil: no gate.
	Gate *FetchGate
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.TLSHandshakeTimeout <= 0 {
		o.TLSHandshakeTimeout = 5 * time.Second
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = 20 * time.Second
	}
	if o.MaxConnsPerHost <= 0 {
		o.MaxConnsPerHost = 8
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = 90 * time.Second
	}
	if o.TLSSessionCacheSize <= 0 {
		o.TLSSessionCacheSize = 8192
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	return o
}

// NewClient returns an HTTP client for talking to remote servers. Its dialer
// checks the address actually dialed (after DNS resolution, so rebinding
// cannot bypass it) and refuses non-global addresses unless AllowPrivate. It
// never follows redirects (the caller sees the 3xx and must re-sign for the
// new URL), ignores proxy environment variables, and sets a User-Agent.
//
// Connections are kept alive per host, up to MaxConnsPerHost idle ones for
// each host, with no pool-wide cap: a fan-out visits thousands of hosts
// before it comes back to the first, and a pool-wide cap would close the
// first hosts' connections before their next delivery. Idle connections
// are bounded by the hosts talked to within IdleConnTimeout. A pool-wide
// cap also costs correctness: net/http evicts the oldest idle connection
// when the pool is full, and a connection that was put back before its
// response (no body) reached the caller can be the one evicted, and the
// request then fails with "putIdleConn: too many idle connections" although
// the response was read: a delivery counted as failed and sent twice.
// HTTP/2 is used where the server offers it; new TLS connections resume a
// cached session.
func NewClient(opts ClientOptions) *http.Client {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	switch {
	case !opts.AllowPrivate:
		dialer.Control = guardControl
	case opts.DenyMetadata:
		allow := slices.Clone(opts.AllowAddrs)
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
			}
			if MetadataAddr(ip) && !AddrAllowed(ip, allow) {
				return fmt.Errorf("%w: %s is link-local or a cloud metadata address", ErrPrivateAddress, ip)
			}
			return nil
		}
	}
	dial := dialer.DialContext
	if opts.LookupHost != nil {
		dial = lookupDial(dialer, opts.LookupHost)
	}
	tr := &http.Transport{
		Proxy:             nil,
		DialContext:       dial,
		ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			RootCAs:            opts.RootCAs,
			ClientSessionCache: tls.NewLRUClientSessionCache(opts.TLSSessionCacheSize),
		},
		MaxIdleConns:          0, // no pool-wide cap: see above
		MaxIdleConnsPerHost:   opts.MaxConnsPerHost,
		MaxConnsPerHost:       opts.MaxConnsPerHost,
		IdleConnTimeout:       opts.IdleConnTimeout,
		TLSHandshakeTimeout:   opts.TLSHandshakeTimeout,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}
	var rt http.RoundTripper = tr
	if opts.Gate != nil {
		rt = opts.Gate.Wrap(tr)
	}
	return &http.Client{
		Transport: &userAgent{next: rt, ua: opts.UserAgent},
		Timeout:   opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// lookupDial dials the addresses lookup gives for a host name, in turn
// until one connects; an address literal is dialed as it is.
func lookupDial(d *net.Dialer, lookup func(context.Context, string) ([]netip.Addr, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err == nil {
			return d.DialContext(ctx, network, address)
		}
		addrs, err := lookup(ctx, host)
		if err != nil {
			return nil, &net.DNSError{Err: err.Error(), Name: host, IsNotFound: true}
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		for _, a := range addrs {
			var c net.Conn
			if c, err = d.DialContext(ctx, network, net.JoinHostPort(a.String(), port)); err == nil {
				return c, nil
			}
		}
		return nil, err
	}
}

// userAgent sets a User-Agent on requests that have none.
type userAgent struct {
	next http.RoundTripper
	ua   string
}

func (u *userAgent) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("User-Agent") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("User-Agent", u.ua)
	}
	return u.next.RoundTrip(r)
}

// CloseIdleConnections closes the idle connections of the wrapped transport.
func (u *userAgent) CloseIdleConnections() {
	if c, ok := u.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// guardControl runs after resolution, on the address about to be dialed.
func guardControl(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
	}
	if !IsGlobalAddr(ip) {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, ip)
	}
	return nil
}

// nonGlobal lists special-purpose ranges (IANA IPv4/IPv6 special-purpose
// registries) that are not globally reachable, beyond what netip's
// predicates cover.
var nonGlobal = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT shared address space
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, ORCHID...)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4 (embeds an IPv4 address)
	netip.MustParsePrefix("3fff::/20"),       // documentation
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs
}

// nat64 is the well-known NAT64 prefix; its addresses embed an IPv4 one.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// metadataAddrs are cloud metadata services outside the link-local ranges:
// AWS's IPv6 one and Alibaba Cloud's.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// MetadataAddr reports whether ip is link-local (169.254.0.0/16, where most
// clouds serve their metadata at 169.254.169.254, and fe80::/10) or another
// cloud metadata address (fd00:ec2::254, 100.100.100.200). IPv4-mapped,
// IPv4-compatible and NAT64 addresses are judged by the IPv4 address they
// carry.
func MetadataAddr(ip netip.Addr) bool {
	ip = embeddedV4(ip.Unmap())
	return ip.IsLinkLocalUnicast() || slices.Contains(metadataAddrs, ip.WithZone(""))
}

// embeddedV4 is the IPv4 address a NAT64 or IPv4-compatible (::a.b.c.d)
// address carries; ip itself otherwise.
func embeddedV4(ip netip.Addr) netip.Addr {
	if !ip.Is6() {
		return ip
	}
	b := ip.As16()
	v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	if nat64.Contains(ip) {
		return v4
	}
	for _, x := range b[:12] {
		if x != 0 {
			return ip
		}
	}
	if v4.As4() == [4]byte{} || v4 == netip.AddrFrom4([4]byte{0, 0, 0, 1}) {
		return ip // :: and ::1 are IPv6's own
	}
	return v4
}

// AddrAllowed reports whether one of allow contains ip (compared unmapped).
func AddrAllowed(ip netip.Addr, allow []netip.Prefix) bool {
	ip = ip.Unmap().WithZone("")
	for _, p := range allow {
		if p.Contains(ip) || p.Contains(embeddedV4(ip)) {
			return true
		}
	}
	return false
}

// IsGlobalAddr reports whether ip is a globally reachable unicast address:
// not loopback, private (RFC 1918, fc00::/7), link-local, unspecified,
// multicast, CGNAT, documentation, benchmarking or otherwise reserved.
// IPv4-mapped and NAT64 addresses are judged by the IPv4 address they carry.
func IsGlobalAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		return IsGlobalAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() {
		return false
	}
	if ip.Zone() != "" {
		return false
	}
	for _, p := range nonGlobal {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}
