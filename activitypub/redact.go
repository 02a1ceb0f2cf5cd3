package activitypub

import (
	"errors"
	"net/url"
	"strings"
	"unicode"
)

// redacted stands in for what RedactURL removes.
const redacted = "redacted"

// RedactURL returns raw fit for a log: its user information, every query
// value and every path segment that looks like a token (secretSegment)
// replaced by "redacted", its fragment dropped; scheme, host and the rest
// of the path kept, so that the log still says where. Webhook URLs often
// carry their credential so (https://hooks.example/services/T0/B0/XXXX...,
// ?token=...); every log of a URL courier did not build itself goes
// through it. A URL that does not parse is "redacted" whole.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redacted
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redacted
		} else {
			for k := range q {
				q[k] = []string{redacted}
			}
			u.RawQuery = q.Encode()
		}
	}
	u.Fragment, u.RawFragment = "", ""
	if u.Opaque != "" {
		u.Opaque = redacted
	}
	segs := strings.Split(u.Path, "/")
	for i, s := range segs {
		if secretSegment(s) {
			segs[i] = redacted
		}
	}
	u.Path, u.RawPath = strings.Join(segs, "/"), ""
	return u.String()
}

// secretSegment reports whether a path segment looks like a token: at
// least 16 characters mixing letters and digits, or at least 32 of any
// kind. Names (users, inbox) are shorter or have no digits.
func secretSegment(s string) bool {
	if len(s) >= 32 {
		return true
	}
	if len(s) < 16 {
		return false
	}
	var letters, digits bool
	for _, r := range s {
		letters = letters || unicode.IsLetter(r)
		digits = digits || unicode.IsDigit(r)
	}
	return letters && digits
}

// RedactError returns err with the URL of a *url.Error in it (as the HTTP
// client's errors carry the request's URL) passed through RedactURL; err
// itself when it has none. What the error wraps is kept, for errors.Is and
// errors.As.
func RedactError(err error) error {
	var ue *url.Error
	if err == nil || !errors.As(err, &ue) {
		return err
	}
	if ue == err {
		return &url.Error{Op: ue.Op, URL: RedactURL(ue.URL), Err: ue.Err}
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), ue.URL, RedactURL(ue.URL)), err: err}
}

// redactedError is an error whose message has its URL redacted.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
