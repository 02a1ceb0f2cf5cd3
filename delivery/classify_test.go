package delivery_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const maxRA = 6 * time.Hour
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "https://x.example/inbox", Err: err} }
	cases := []struct {
		name       string
		status     int
		header     http.Header
		err        error
		verdict    delivery.Verdict
		hostDown   bool
		gone       bool
		retryAfter time.Duration
	}{
		{name: "200", status: 200, verdict: delivery.Delivered},
		{name: "202", status: 202, verdict: delivery.Delivered},
		{name: "204", status: 204, verdict: delivery.Delivered},
		{name: "301 not followed", status: 301, header: hdr("Location", "https://y.example/inbox"), verdict: delivery.Permanent},
		{name: "308 not followed", status: 308, verdict: delivery.Permanent},
		{name: "400", status: 400, verdict: delivery.Permanent},
		{name: "401 retried: key not yet fetchable", status: 401, verdict: delivery.Retry},
		{name: "403", status: 403, verdict: delivery.Permanent},
		{name: "404", status: 404, verdict: delivery.Permanent},
		{name: "408", status: 408, verdict: delivery.Retry},
		{name: "410 gone", status: 410, verdict: delivery.Permanent, gone: true},
		{name: "413", status: 413, verdict: delivery.Permanent},
		{name: "422", status: 422, verdict: delivery.Permanent},
		{name: "429", status: 429, verdict: delivery.Retry},
		{name: "429 Retry-After seconds", status: 429, header: hdr("Retry-After", "120"), verdict: delivery.Retry, retryAfter: 2 * time.Minute},
		{name: "429 Retry-After HTTP date", status: 429, header: hdr("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)),
			verdict: delivery.Retry, retryAfter: 90 * time.Second},
		{name: "429 Retry-After past date", status: 429, header: hdr("Retry-After", now.Add(-time.Hour).Format(http.TimeFormat)), verdict: delivery.Retry},
		{name: "429 Retry-After clamped", status: 429, header: hdr("Retry-After", "86400000"), verdict: delivery.Retry, retryAfter: maxRA},
		{name: "429 Retry-After garbage", status: 429, header: hdr("Retry-After", "soon"), verdict: delivery.Retry},
		{name: "500", status: 500, verdict: delivery.Retry, hostDown: true},
		{name: "502", status: 502, verdict: delivery.Retry, hostDown: true},
		{name: "503 Retry-After", status: 503, header: hdr("Retry-After", "30"), verdict: delivery.Retry, hostDown: true, retryAfter: 30 * time.Second},
		{name: "504", status: 504, verdict: delivery.Retry, hostDown: true},
		{name: "timeout", err: urlErr(timeoutErr{}), verdict: delivery.Retry, hostDown: true},
		{name: "deadline", err: urlErr(context.DeadlineExceeded), verdict: delivery.Retry, hostDown: true},
		{name: "connection refused", err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), verdict: delivery.Retry, hostDown: true},
		{name: "connection reset", err: urlErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), verdict: delivery.Retry, hostDown: true},
		{name: "unknown host", err: urlErr(&net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x.example", IsNotFound: true}}),
			verdict: delivery.Retry, hostDown: true},
		{name: "tls unknown authority", err: urlErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), verdict: delivery.Retry, hostDown: true},
		{name: "tls record header", err: urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), verdict: delivery.Retry, hostDown: true},
		{name: "private address", err: urlErr(&net.OpError{Op: "dial", Err: fmt.Errorf("%w: 127.0.0.1", activitypub.ErrPrivateAddress)}),
			verdict: delivery.Refused},
		{name: "bad url", err: fmt.Errorf("%w: ftp://x", activitypub.ErrBadURL), verdict: delivery.Permanent},
		{name: "other error", err: errors.New("unexpected EOF"), verdict: delivery.Retry, hostDown: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := delivery.Classify(c.status, c.header, c.err, now, maxRA)
			if d.Verdict != c.verdict || d.HostDown != c.hostDown || d.Gone != c.gone || d.RetryAfter != c.retryAfter {
				t.Errorf("Classify = %+v, want verdict %s host_down %v gone %v retry_after %s",
					d, c.verdict, c.hostDown, c.gone, c.retryAfter)
			}
			if d.Reason == "" {
				t.Error("empty reason")
			}
		})
	}
}

// FuzzRetryAfter feeds Classify arbitrary Retry-After values: it must not
// panic, and the delay stays within [0, the clamp].
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "-5", "Wed, 21 Oct 2015 07:28:00 GMT", "soon", "99999999999999999999", ""} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		for _, status := range []int{429, 503} {
			d := delivery.Classify(status, http.Header{"Retry-After": {v}}, nil, now, time.Hour)
			if d.RetryAfter < 0 || d.RetryAfter > time.Hour {
				t.Fatalf("Retry-After %q gave %s", v, d.RetryAfter)
			}
		}
	})
}
