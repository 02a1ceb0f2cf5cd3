package inbox

import (
	"errors"
	"net/http"

	"github.com/courier-ap/courier/activitypub"
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

// Results of requests that are not rejections, beside metrics.InboxAccepted
// and metrics.InboxDuplicate.
const (
	// resultDroppedDelete: a Delete of a gone actor courier holds no key
	// for, answered 202 and dropped.
	resultDroppedDelete = "dropped_unverifiable_delete"
	resultInternal      = "internal_error"
)

// classify maps an acceptance error to its HTTP status and metrics result.
// It is the one place that turns errors into statuses.
func classify(err error) (int, string) {
	var missing *activitypub.MissingFieldError
	switch {
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
	case errors.As(err, &missing):
		return http.StatusBadRequest, "missing_field"
	case errors.Is(err, activitypub.ErrMalformed):
		return http.StatusBadRequest, "malformed_json"
	case errors.Is(err, ErrBadURL):
		return http.StatusBadRequest, "bad_url"
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
	case errors.Is(err, ErrUnknownKey):
		return http.StatusUnauthorized, "unknown_key"
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
		metrics.InboxAccepted, metrics.InboxDuplicate, resultDroppedDelete, resultIgnored, resultThrottled,
		"bad_content_type", "body_too_large", "unknown_inbox", "missing_field", "malformed_json", "bad_url",
		"no_signature", "rfc9421_signature", "malformed_signature", "unsigned_header", "digest_mismatch",
		"date_out_of_window", "unsupported_key", "bad_signature", "unknown_key", "actor_not_key_owner",
		"domain_blocked", "actor_blocked", "origin_mismatch", "wrong_host", resultInternal,
	}
}
