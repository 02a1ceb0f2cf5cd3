package activitypub

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Temporary reports whether a fetch error says only that the remote, the
// network or courier's own fetch gate could not answer now: ErrHostBusy, a
// timeout, a connection refused or reset, a name server that did not
// answer, or a 5xx, 408 or 429 status. Another attempt later may succeed,
// so a request whose signature needs the fetch is deferred (503), not
// refused. What the remote answered for good (404, 410, another 4xx, a
// document that is not an actor, a key it does not carry, a private
// address, a name that does not exist) is not temporary.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	for _, final := range []error{ErrGone, ErrNotFound, ErrPrivateAddress, ErrIDMismatch, ErrContentType,
		ErrTooLarge, ErrKeyNotFound, ErrBadURL, ErrMalformed, ErrBadKey, ErrFetchRefused} {
		if errors.Is(err, final) {
			return false
		}
	}
	if errors.Is(err, ErrHostBusy) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status >= 500 || se.Status == 429 || se.Status == 408
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// RetryAfterOf returns how long the remote or the fetch gate said to wait
// before trying again (a BusyError's Wait, a StatusError's Retry-After), 0
// when err says nothing.
func RetryAfterOf(err error) time.Duration {
	var be *BusyError
	if errors.As(err, &be) {
		return be.Wait
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
