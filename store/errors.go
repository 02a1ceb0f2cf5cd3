package store

import (
	"errors"
	"fmt"
)

// Code classifies a store error for the layer that reports it (an HTTP
// status, an exit code). One function per transport maps codes; nothing
// looks at error strings.
type Code string

// Error codes.
const (
	// EINTERNAL is an unexpected failure (database, encoding).
	EINTERNAL Code = "internal"
	// EINVALID is malformed or out-of-range input.
	EINVALID Code = "invalid"
	// ENOTFOUND is an unknown actor, object or activity.
	ENOTFOUND Code = "not_found"
	// ECONFLICT is a state clash, such as a taken actor name.
	ECONFLICT Code = "conflict"
	// EFORBIDDEN is an authenticated actor acting on what it does not own.
	EFORBIDDEN Code = "forbidden"
	// EUNAUTHORIZED is a missing or wrong credential.
	EUNAUTHORIZED Code = "unauthorized"
	// EGONE is a deleted object.
	EGONE Code = "gone"
	// EUNPROCESSABLE is well-formed input that courier does not support
	// (an unknown activity type, an Undo of something undoable).
	EUNPROCESSABLE Code = "unprocessable"
)

// Error is a store error with a code and a message safe to show a client.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "store: " + string(e.Code)
	}
	return "store: " + e.Message
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, store.ErrNotFound) holds for every not-found error.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels, one per code, for errors.Is.
var (
	ErrInvalid       = &Error{Code: EINVALID}
	ErrNotFound      = &Error{Code: ENOTFOUND}
	ErrConflict      = &Error{Code: ECONFLICT}
	ErrForbidden     = &Error{Code: EFORBIDDEN}
	ErrUnauthorized  = &Error{Code: EUNAUTHORIZED}
	ErrGone          = &Error{Code: EGONE}
	ErrUnprocessable = &Error{Code: EUNPROCESSABLE}
)

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL
// for any other error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the client-safe message of the first *Error in err's
// chain, and "internal error" for any other error.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		if e.Message == "" {
			return string(e.Code)
		}
		return e.Message
	}
	return "internal error"
}
