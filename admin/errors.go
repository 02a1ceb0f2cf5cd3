package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/outbox/natsbus"
	"github.com/courier-ap/courier/store"
)

// Code classifies an admin error; Status maps it to an HTTP status.
type Code string

// Error codes.
const (
	// EINVALID: a malformed request (bad filter, bad id, bad body).
	EINVALID Code = "invalid"
	// EUNAUTHORIZED: a missing or wrong bearer token.
	EUNAUTHORIZED Code = "unauthorized"
	// ENOTFOUND: no such event, record, activity, host, domain or endpoint.
	ENOTFOUND Code = "not_found"
	// EDISABLED: the admin API is off (no token configured).
	EDISABLED Code = "disabled"
	// EMETHOD: the endpoint exists but not with this method.
	EMETHOD Code = "method_not_allowed"
	// ECONFLICT: the target is not in a state that allows the action
	// (retrying an event that is not dead-lettered).
	ECONFLICT Code = "conflict"
	// ECONFIRM: a destructive action needs its confirmation parameter.
	ECONFIRM Code = "confirmation_required"
	// EUNAVAILABLE: the component behind the endpoint is not in use on this
	// server (JetStream with the db bus, host health without delivery).
	EUNAVAILABLE Code = "unavailable"
	// ETOOLARGE: the request body is over the limit.
	ETOOLARGE Code = "too_large"
	// ETHROTTLED: too many failed token attempts from the client's address.
	ETHROTTLED Code = "too_many_requests"
	// EINTERNAL: anything else; the details are logged, not shown.
	EINTERNAL Code = "internal"
)

// ErrNotFound may be wrapped by implementations of Hosts and Deliveries (as
// DeliveryState does) to report an unknown host or activity.
var ErrNotFound = &Error{Code: ENOTFOUND}

// Error is an admin error with a code and a message safe to show an
// operator.
type Error struct {
	Code    Code
	Message string
	// Fields are extra members of the JSON error body (for a missing drain
	// confirmation: the host and how many deliveries would be discarded).
	Fields map[string]any
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "admin: " + string(e.Code)
	}
	return "admin: " + e.Message
}

// Is makes errors.Is(err, ErrNotFound) hold for every not-found *Error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: sprintf(format, args...)}
}

// Status is the one mapping from error codes to HTTP statuses.
func Status(c Code) int {
	switch c {
	case EINVALID:
		return http.StatusBadRequest
	case EUNAUTHORIZED:
		return http.StatusUnauthorized
	case ENOTFOUND, EDISABLED:
		return http.StatusNotFound
	case EMETHOD:
		return http.StatusMethodNotAllowed
	case ECONFLICT, ECONFIRM, EUNAVAILABLE:
		return http.StatusConflict
	case ETOOLARGE:
		return http.StatusRequestEntityTooLarge
	case ETHROTTLED:
		return http.StatusTooManyRequests
	}
	return http.StatusInternalServerError
}

// classify returns the code and the operator-safe message of err: admin's
// own errors as they are, the sentinels of the packages the API calls
// translated, anything else internal.
func classify(err error) (Code, string) {
	var ae *Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.Code, ae.Message
	case errors.As(err, &mbe):
		return ETOOLARGE, sprintf("request body over %d bytes", mbe.Limit)
	case errors.Is(err, outbox.ErrNotFound), errors.Is(err, natsbus.ErrNotFound):
		return ENOTFOUND, trimPrefix(err.Error())
	case errors.Is(err, outbox.ErrState):
		return ECONFLICT, trimPrefix(err.Error())
	}
	var se *store.Error
	if errors.As(err, &se) {
		switch se.Code {
		case store.ENOTFOUND:
			return ENOTFOUND, store.ErrorMessage(err)
		case store.EINVALID, store.EUNPROCESSABLE:
			return EINVALID, store.ErrorMessage(err)
		case store.ECONFLICT:
			return ECONFLICT, store.ErrorMessage(err)
		}
	}
	return EINTERNAL, "internal error"
}

// writeError answers err as JSON with the status of its code. Internal
// errors are logged (an operator must act on them) and shown as "internal
// error"; a client that went away is not an error of the server.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	code, msg := classify(err)
	if code == EINTERNAL {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			log.DebugContext(r.Context(), "admin: request abandoned by the client", "path", r.URL.Path, "err", err)
		} else {
			log.ErrorContext(r.Context(), "admin: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	if msg == "" {
		msg = string(code)
	}
	body := map[string]any{"error": msg, "code": code}
	var ae *Error
	if errors.As(err, &ae) {
		for k, v := range ae.Fields {
			if k != "error" && k != "code" {
				body[k] = v
			}
		}
	}
	if err := writeJSON(w, Status(code), body); err != nil {
		log.ErrorContext(r.Context(), "admin: write error answer", "err", err)
	}
}

// writeJSON writes v as indented JSON with status. A value that cannot be
// encoded is returned as an error before anything is written.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("admin: encode answer: %w", err)
	}
	httpedge.WriteRaw(w, status, httpedge.ContentTypeJSON, append(b, '\n'))
	return nil
}

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// trimPrefix drops the package prefixes of a wrapped error's text, which
// mean nothing to an operator.
func trimPrefix(s string) string {
	for _, p := range []string{"outbox: ", "natsbus: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return s
}
