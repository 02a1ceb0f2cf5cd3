package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/store"
)

// Codes of errors the HTTP layer raises itself, beside store's.
const (
	// eUnavailable is a temporary condition on courier's side (a mention's
	// lookup, a Move's target, that failed for now): 503 with Retry-After.
	eUnavailable store.Code = "unavailable"
	// eTooLarge is a request body over the limit.
	eTooLarge store.Code = "too_large"
	// eMediaType is a request body of a content type courier does not read.
	eMediaType store.Code = "unsupported_media_type"
	// eMethod is a method the route does not serve.
	eMethod store.Code = "method_not_allowed"
	// eSignature is a GET whose HTTP signature is required, or present, and
	// does not verify.
	eSignature store.Code = "bad_signature"
	// eThrottled is a client that used up its failed token attempts.
	eThrottled store.Code = "too_many_requests"
)

// The codes the application's routes (package app) raise too, answered by
// Status.
const (
	EThrottled   = eThrottled
	EUnavailable = eUnavailable
)

// Status maps an error code to its HTTP status, for courier's other HTTP
// surfaces on the public listener (package app): one mapping for all.
func Status(code store.Code) int { return status(code) }

// status maps an error code to its HTTP status. It is the only place that
// does.
func status(code store.Code) int {
	switch code {
	case store.EINVALID:
		return http.StatusBadRequest
	case store.EUNAUTHORIZED, eSignature:
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
	case eTooLarge:
		return http.StatusRequestEntityTooLarge
	case eMediaType:
		return http.StatusUnsupportedMediaType
	case eMethod:
		return http.StatusMethodNotAllowed
	case eThrottled:
		return http.StatusTooManyRequests
	case eUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// errorBody is the JSON body of every error response.
type errorBody struct {
	Error string `json:"error"`
	// Existing is the id of the activity that already stands for the
	// request (a second Follow of one actor: the first).
	Existing string `json:"existing,omitempty"`
}

// writeError answers err as {"error": "..."} with the status of its code.
// Internal errors are logged at error level (an operator must look) and
// answered with a generic message; client errors are not logged.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code := store.ErrorCode(err)
	st := status(code)
	msg := store.ErrorMessage(err)
	if st >= 500 && code != eUnavailable {
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", st, "err", err)
		msg = "internal error"
	}
	switch code {
	case store.EUNAUTHORIZED:
		w.Header().Set("WWW-Authenticate", `Bearer realm="courier"`)
	case eSignature:
		w.Header().Set("WWW-Authenticate", `Signature realm="courier",headers="(request-target) host date"`)
	case eUnavailable:
		w.Header().Set("Retry-After", "30")
	}
	var te *throttledError
	if errors.As(err, &te) {
		w.Header().Set("Retry-After", limit.RetryAfter(te.wait))
	}
	body := errorBody{Error: msg}
	var ex *store.ExistingError
	if errors.As(err, &ex) {
		body.Existing = ex.ID
	}
	writeJSON(w, st, "application/json; charset=utf-8", body)
}

// NotFoundHandler answers a path no route serves: 404 with the JSON error
// body, like every other error (a router's default is a plain-text page).
func NotFoundHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, "application/json; charset=utf-8",
			errorBody{Error: store.ErrorMessage(store.Errorf(store.ENOTFOUND, "no route %s", r.URL.Path))})
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
		writeJSON(w, http.StatusMethodNotAllowed, "application/json; charset=utf-8",
			errorBody{Error: store.ErrorMessage(store.Errorf(eMethod, "method %s not allowed on %s", r.Method, r.URL.Path))})
	})
}
