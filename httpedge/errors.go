package httpedge

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/store"
)

// Codes of errors the HTTP edge raises itself, beside store's.
const (
	// EUnavailable is a temporary condition on courier's side (a mention's
	// lookup, a Move's target, that failed for now; a stream over its
	// bounds): 503 with Retry-After.
	EUnavailable store.Code = "unavailable"
	// ETooLarge is a request body over the limit.
	ETooLarge store.Code = "too_large"
	// EMediaType is a request body of a content type courier does not read.
	EMediaType store.Code = "unsupported_media_type"
	// EMethod is a method the route does not serve.
	EMethod store.Code = "method_not_allowed"
	// ESignature is a GET whose HTTP signature is required, or present, and
	// does not verify.
	ESignature store.Code = "bad_signature"
	// EThrottled is a client that used up its failed token attempts.
	EThrottled store.Code = "too_many_requests"
)

// Status maps an error code to its HTTP status. It is the only place that
// does.
func Status(code store.Code) int {
	switch code {
	case store.EINVALID:
		return http.StatusBadRequest
	case store.EUNAUTHORIZED, ESignature:
		return http.StatusUnauthorized
	case store.EFORBIDDEN:
		return http.StatusForbidden
	case store.ENOTFOUND:
		return http.StatusNotFound
	case store.ECONFLICT:
		return http.StatusConflict
	case store.EGONE:
		return http.StatusGone
	case store.EUNPROCESSABLE:
		return http.StatusUnprocessableEntity
	case ETooLarge:
		return http.StatusRequestEntityTooLarge
	case EMediaType:
		return http.StatusUnsupportedMediaType
	case EMethod:
		return http.StatusMethodNotAllowed
	case EThrottled:
		return http.StatusTooManyRequests
	case EUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// Retrier is an error whose answer carries a Retry-After: a throttled
// client, a temporary condition on courier's side. *RetryError is one; the
// inbox's throttled and deferred requests are others.
type Retrier interface {
	error
	RetryAfter() time.Duration
}

// RetryAfter is the wait of the first Retrier in err's chain, and whether
// there is one.
func RetryAfter(err error) (time.Duration, bool) {
	var re Retrier
	if errors.As(err, &re) {
		return re.RetryAfter(), true
	}
	return 0, false
}

// RetryError is an error with the wait its answer's Retry-After carries.
type RetryError struct {
	Wait time.Duration
	Err  error
}

func (e *RetryError) Error() string             { return e.Err.Error() }
func (e *RetryError) Unwrap() error             { return e.Err }
func (e *RetryError) RetryAfter() time.Duration { return e.Wait }

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
	// Existing is the id of the activity that already stands for the
	// request (a second Follow of one actor: the first).
	Existing string `json:"existing,omitempty"`
}

// ContentTypeJSON is the Content-Type of courier's plain JSON bodies:
// every error body, the admin API's answers.
const ContentTypeJSON = "application/json; charset=utf-8"

// WriteError answers err as {"error": "..."} with the status of its code.
// Internal errors are logged at error level on log (an operator must look)
// and answered with a generic message; client errors are not logged.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	code := store.ErrorCode(err)
	st := Status(code)
	msg := store.ErrorMessage(err)
	if st >= 500 && code != EUnavailable {
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", st, "err", err)
		msg = "internal error"
	}
	switch code {
	case store.EUNAUTHORIZED:
		w.Header().Set("WWW-Authenticate", `Bearer realm="courier"`)
	case ESignature:
		w.Header().Set("WWW-Authenticate", `Signature realm="courier",headers="(request-target) host date"`)
	case EUnavailable:
		w.Header().Set("Retry-After", "30")
	}
	if wait, ok := RetryAfter(err); ok {
		w.Header().Set("Retry-After", limit.RetryAfter(wait))
	}
	body := ErrorBody{Error: msg}
	var ex *store.ExistingError
	if errors.As(err, &ex) {
		body.Existing = ex.ID
	}
	WriteJSON(w, st, ContentTypeJSON, body)
}

// WriteMessage answers status with {"error": msg}, for a surface that
// chose its status itself (the inbox's verification).
func WriteMessage(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ContentTypeJSON, ErrorBody{Error: msg})
}

// NotFoundHandler answers a path no route serves: 404 with the JSON error
// body, like every other error (a router's default is a plain-text page).
func NotFoundHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusNotFound, ContentTypeJSON,
			ErrorBody{Error: store.ErrorMessage(store.Errorf(store.ENOTFOUND, "no route %s", r.URL.Path))})
	})
}

// MethodNotAllowedHandler answers a method the route at the path does not
// serve: 405 with the JSON error body and, as RFC 9110 requires, an Allow
// header listing the methods router serves there (a router's default is an
// empty body).
func MethodNotAllowedHandler(router *mux.Router) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			probe := r.Clone(r.Context())
			probe.Method = m
			var match mux.RouteMatch
			if router.Match(probe, &match) && match.MatchErr == nil {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
		}
		WriteJSON(w, http.StatusMethodNotAllowed, ContentTypeJSON,
			ErrorBody{Error: store.ErrorMessage(store.Errorf(EMethod, "method %s not allowed on %s", r.Method, r.URL.Path))})
	})
}
