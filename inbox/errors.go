package inbox

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/metrics"
)

// Rejections of an inbound request. Each failure of the acceptance path
// matches one of these or one of activitypub's verification errors, and
// classify maps it to a status and a metrics result.
var (
	// ErrContentType: the request's Content-Type is not an ActivityPub type.
	ErrContentType = errors.New("inbox: content type is not application/activity+json or ActivityStreams JSON-LD")
	// ErrTooLarge: the body exceeds Config.MaxBody.
	ErrTooLarge = errors.New("inbox: body too large")
	// ErrUnknownInbox: the personal inbox names no local actor.
	ErrUnknownInbox = errors.New("inbox: no such inbox")
	// ErrUnknownKey: the signature's key could not be resolved.
	ErrUnknownKey = errors.New("inbox: signature key cannot be resolved")
	// ErrActorMismatch: the activity's actor does not own the signing key.
	ErrActorMismatch = errors.New("inbox: activity actor is not the signing key's owner")
	// ErrOrigin: the activity or its object claims an origin the actor
	// cannot speak for (another host, another author).
	ErrOrigin = errors.New("inbox: activity or object origin does not match its actor")
	// ErrDomainBlocked: the sender's domain is blocked.
	ErrDomainBlocked = errors.New("inbox: domain blocked")
	// ErrActorBlocked: the local actor the activity is for blocks its actor.
	ErrActorBlocked = errors.New("inbox: actor blocked")
	// ErrBadURL: the activity's id or actor is not an absolute http(s) URL.
	ErrBadURL = errors.New("inbox: activity id and actor must be absolute http(s) URLs")
)

// ErrDeferred: a temporary condition on courier's side (the fetch gate, the
// key's host slow, busy or failing, the database busy) kept courier from
// verifying or storing the request now. It is answered 503 with
// Retry-After, never 401: the sender retries, and nothing says its
// signature is wrong. See *DeferredError.
var ErrDeferred = errors.New("inbox: the request cannot be verified or stored now; retry later")

// DeferredError is ErrDeferred with its reason (a metrics.InboxDeferred
// constant), the wait its answer's Retry-After carries and the cause.
type DeferredError struct {
	Reason string
	Wait   time.Duration
	Err    error
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("%v (%s; retry in %ss): %v", ErrDeferred, e.Reason, limit.RetryAfter(e.Wait), e.Err)
}

// Unwrap makes the error match ErrDeferred and its cause.
func (e *DeferredError) Unwrap() []error { return []error{ErrDeferred, e.Err} }

// RetryAfter is the wait the answer's Retry-After carries (httpedge.Retrier).
func (e *DeferredError) RetryAfter() time.Duration { return e.Wait }

// Bounds and defaults of a deferred request's Retry-After.
const (
	minDeferWait           = time.Second
	maxDeferWait           = 5 * time.Minute
	defaultUnavailableWait = 30 * time.Second
)

// deferral returns err as a *DeferredError when it is one or says the
// database is busy, else nil.
func deferral(err error) *DeferredError {
	var d *DeferredError
	if errors.As(err, &d) {
		return d
	}
	if dbBusy(err) {
		return &DeferredError{Reason: metrics.InboxDeferredDatabaseBusy, Wait: minDeferWait, Err: err}
	}
	return nil
}

// deferFetch returns the *DeferredError of a key fetch that failed for a
// temporary reason (activitypub.Temporary), with the wait the remote or the
// fetch gate gave, bounded.
func deferFetch(keyID string, err error) *DeferredError {
	reason, wait := metrics.InboxDeferredKeyHostUnavailable, activitypub.RetryAfterOf(err)
	if errors.Is(err, activitypub.ErrHostBusy) {
		reason = metrics.InboxDeferredKeyHostBusy
	} else if wait == 0 {
		wait = defaultUnavailableWait
	}
	return &DeferredError{Reason: reason, Wait: min(max(wait, minDeferWait), maxDeferWait),
		Err: fmt.Errorf("key %s: %w", keyID, err)}
}

// dbBusy reports whether err says the database cannot take the work now:
// SQLite's SQLITE_BUSY or SQLITE_LOCKED, or PostgreSQL's serialization
// failure, deadlock, lock not available, too many connections or a server
// starting up or shutting down.
func dbBusy(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		switch pg.SQLState() {
		case "40001", "40P01", "55P03", "53300", "57P01", "57P03":
			return true
		}
	}
	return false
}

// resultDeferred: a request answered 503 (label result of
// courier_inbox_requests_total; courier_inbox_deferred_total has the
// reason).
const resultDeferred = "deferred"

// Results of requests that are not rejections, beside metrics.InboxAccepted
// and metrics.InboxDuplicate.
const (
	// resultDroppedDelete: a Delete of a gone actor courier holds no key
	// for, answered 202 and dropped.
	resultDroppedDelete = "dropped_unverifiable_delete"
	resultInternal      = "internal_error"
	// resultBadProof: an FEP-8b32 integrity proof that is malformed or
	// does not verify (401).
	resultBadProof = "bad_proof"
)

// classify maps an acceptance error to its HTTP status and metrics result.
// It is the one place that turns errors into statuses.
func classify(err error) (int, string) {
	var missing *activitypub.MissingFieldError
	switch {
	case deferral(err) != nil:
		return http.StatusServiceUnavailable, resultDeferred
	case errors.Is(err, ErrThrottled):
		return http.StatusTooManyRequests, resultThrottled
	case errors.Is(err, ErrWrongHost):
		return http.StatusMisdirectedRequest, "wrong_host"
	case errors.Is(err, ErrContentType):
		return http.StatusUnsupportedMediaType, "bad_content_type"
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "body_too_large"
	case errors.Is(err, ErrUnknownInbox):
		return http.StatusNotFound, "unknown_inbox"
	case errors.Is(err, ErrUnknownKey):
		// Before the document errors: a key whose document is malformed,
		// lacks a field or is no actor (activitypub.ErrNotActor) leaves
		// the signature unverified, which is a 401.
		return http.StatusUnauthorized, "unknown_key"
	case errors.As(err, &missing):
		return http.StatusBadRequest, "missing_field"
	case errors.Is(err, activitypub.ErrMalformed):
		return http.StatusBadRequest, "malformed_json"
	case errors.Is(err, ErrBadURL):
		return http.StatusBadRequest, "bad_url"
	case errors.Is(err, activitypub.ErrText):
		return http.StatusBadRequest, "bad_text"
	case errors.Is(err, activitypub.ErrNoSignature):
		return http.StatusUnauthorized, "no_signature"
	case errors.Is(err, activitypub.ErrRFC9421):
		return http.StatusUnauthorized, "rfc9421_signature"
	case errors.Is(err, activitypub.ErrMalformedSignature):
		return http.StatusUnauthorized, "malformed_signature"
	case errors.Is(err, activitypub.ErrMissingSignedHeader):
		return http.StatusUnauthorized, "unsigned_header"
	case errors.Is(err, activitypub.ErrDigestMismatch):
		return http.StatusUnauthorized, "digest_mismatch"
	case errors.Is(err, activitypub.ErrDateOutOfWindow):
		return http.StatusUnauthorized, "date_out_of_window"
	case errors.Is(err, activitypub.ErrUnsupportedKey):
		return http.StatusUnauthorized, "unsupported_key"
	case errors.Is(err, activitypub.ErrBadSignature):
		return http.StatusUnauthorized, "bad_signature"
	case errors.Is(err, activitypub.ErrProof):
		return http.StatusUnauthorized, resultBadProof
	case errors.Is(err, ErrActorMismatch):
		return http.StatusUnauthorized, "actor_not_key_owner"
	case errors.Is(err, ErrDomainBlocked):
		return http.StatusForbidden, "domain_blocked"
	case errors.Is(err, ErrActorBlocked):
		return http.StatusForbidden, "actor_blocked"
	case errors.Is(err, ErrOrigin):
		return http.StatusForbidden, "origin_mismatch"
	}
	return http.StatusInternalServerError, resultInternal
}

// Results lists every metrics result the inbox reports, for dashboards and
// tests: accepted, duplicate, the dropped Delete, and each rejection.
func Results() []string {
	return []string{
		metrics.InboxAccepted, metrics.InboxDuplicate, resultDroppedDelete, resultIgnored, resultThrottled, resultDeferred,
		"bad_content_type", "body_too_large", "unknown_inbox", "missing_field", "malformed_json", "bad_url", "bad_text",
		"no_signature", "rfc9421_signature", "malformed_signature", "unsigned_header", "digest_mismatch",
		"date_out_of_window", "unsupported_key", "bad_signature", resultBadProof, "unknown_key", "actor_not_key_owner",
		"domain_blocked", "actor_blocked", "origin_mismatch", "wrong_host", resultInternal,
	}
}
