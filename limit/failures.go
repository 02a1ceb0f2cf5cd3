package limit

import (
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Defaults of the failed-attempt throttle: ten failures at once, then one
// every six seconds (ten a minute) per client address.
const (
	DefaultFailureBurst = 10
	DefaultFailureRate  = 1.0 / 6
)

// Failures throttles failed credential attempts per client address: each
// failure takes a token, and an address without one is refused before its
// credential is looked at, so guessing runs at DefaultFailureRate at most.
// It is safe for concurrent use.
type Failures struct {
	k *Keyed
}

// NewFailures returns the throttle with the default budget, on the clock
// now (nil: time.Now).
func NewFailures(now func() time.Time) *Failures {
	return &Failures{k: New(Config{Rate: DefaultFailureRate, Burst: DefaultFailureBurst, Now: now})}
}

// Wait returns how long the client at remoteAddr (an http.Request's
// RemoteAddr) must wait before its next attempt: 0 when it may try now.
func (f *Failures) Wait(remoteAddr string) time.Duration {
	return f.k.Wait(ClientKey(remoteAddr))
}

// Failed records a failed attempt of the client at remoteAddr.
func (f *Failures) Failed(remoteAddr string) {
	f.k.Charge(ClientKey(remoteAddr), 1)
}

// ClientKey is the throttled unit of a client address: the IP address
// (without port) for IPv4, its /64 for IPv6, where one client holds a
// whole prefix; remoteAddr itself when it is not an address.
func ClientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return remoteAddr
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64) // cannot fail for an IPv6 address
		return p.String()
	}
	return ip.String()
}

// RetryAfter renders a wait as a Retry-After value: whole seconds, at
// least 1.
func RetryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}
