package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// Verdict is what becomes of a delivery after one POST.
type Verdict uint8

// The verdicts of Classify.
const (
	// Delivered: the remote accepted the activity (2xx).
	Delivered Verdict = iota + 1
	// Retry: a transient failure (401, 408, 429, 5xx, timeout, connection,
	// TLS or DNS error); the delivery is retried on the outbox backoff, no
	// sooner than Decision.RetryAfter.
	Retry
	// Permanent: no retry can succeed (410, other 4xx, a redirect); the
	// failure is recorded and the delivery given up.
	Permanent
	// Refused: courier did not send it (a private address without
	// --allow-private-addresses); given up like Permanent.
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Delivered:
		return "delivered"
	case Retry:
		return "retry"
	case Permanent:
		return "permanent"
	case Refused:
		return "refused"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Decision is the classification of one POST's response or error.
type Decision struct {
	Verdict Verdict
	// HostDown reports that the failure says something about the host
	// itself (no answer, TLS, DNS, 5xx) and counts against its health. A
	// host that answered anything else is alive.
	HostDown bool
	// Gone reports a 410: the inbox's actor no longer exists.
	Gone bool
	// RetryAfter is the remote's Retry-After, clamped to the configured
	// maximum; zero when absent. A lower bound on the next attempt.
	RetryAfter time.Duration
	// Reason is a short, log-safe description (never the response body)
	// for logs and the recorded attempt; what became of the delivery is
	// Verdict, never read back from Reason.
	Reason string
}

// Classify is the one place that reads delivery status codes and transport
// errors. status is the response's code (0 when err is set), header its
// headers (nil allowed), err the transport error, now the clock for an
// HTTP-date Retry-After, and maxRetryAfter the clamp for Retry-After.
func Classify(status int, header http.Header, err error, now time.Time, maxRetryAfter time.Duration) Decision {
	if err != nil {
		return classifyError(err)
	}
	switch {
	case status >= 200 && status < 300:
		return Decision{Verdict: Delivered, Reason: fmt.Sprintf("status %d", status)}
	case status >= 300 && status < 400:
		loc := ""
		if header != nil {
			loc = header.Get("Location")
		}
		if len(loc) > 200 {
			loc = loc[:200]
		}
		return Decision{Verdict: Permanent, Reason: fmt.Sprintf("status %d: redirect to %q not followed", status, loc)}
	case status == http.StatusGone:
		return Decision{Verdict: Permanent, Gone: true, Reason: "status 410: gone"}
	case status == http.StatusUnauthorized, status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		// 401: the peer may not yet be able to fetch our key.
		return Decision{Verdict: Retry, RetryAfter: activitypub.RetryAfter(header.Get("Retry-After"), now, maxRetryAfter),
			Reason: fmt.Sprintf("status %d", status)}
	case status >= 400 && status < 500:
		return Decision{Verdict: Permanent, Reason: fmt.Sprintf("status %d", status)}
	case status >= 500 && status < 600:
		return Decision{Verdict: Retry, HostDown: true, RetryAfter: activitypub.RetryAfter(header.Get("Retry-After"), now, maxRetryAfter),
			Reason: fmt.Sprintf("status %d", status)}
	}
	return Decision{Verdict: Retry, Reason: fmt.Sprintf("unexpected status %d", status)}
}

func classifyError(err error) Decision {
	var (
		dns     *net.DNSError
		netErr  net.Error
		certErr *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, activitypub.ErrPrivateAddress):
		return Decision{Verdict: Refused, Reason: "refused: " + err.Error()}
	case errors.Is(err, activitypub.ErrBadURL):
		return Decision{Verdict: Permanent, Reason: err.Error()}
	case errors.Is(err, context.Canceled):
		return Decision{Verdict: Retry, Reason: "cancelled"}
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return Decision{Verdict: Retry, HostDown: true, Reason: "unknown host: " + dns.Name}
		}
		return Decision{Verdict: Retry, HostDown: true, Reason: "dns: " + dns.Err}
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert),
		errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
		return Decision{Verdict: Retry, HostDown: true, Reason: "tls: " + lastPart(err)}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return Decision{Verdict: Retry, HostDown: true, Reason: "timeout"}
	}
	return Decision{Verdict: Retry, HostDown: true, Reason: "connection: " + lastPart(err)}
}

// lastPart trims the "Post "url": " prefix *url.Error adds, keeping the
// cause short and free of the full URL.
func lastPart(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && i+2 < len(s) {
		s = s[i+2:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
