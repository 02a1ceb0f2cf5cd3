package httpedge

import (
	"net/http"
	"strings"

	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/store"
)

// Bearer returns the token of an "Authorization: Bearer" header, and
// whether the request has one. Other schemes (a peer's "Authorization:
// Signature") do not count.
func Bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// Auth checks bearer tokens as local actors' under one throttle of failed
// attempts per client address.
type Auth struct {
	Store    *store.Store
	Failures *limit.Failures
}

// Authenticate checks tok as the bearer token of the actor name, unless
// the client's address has used up its failed attempts (EThrottled, a
// *RetryError with the wait); a wrong token counts as a failed attempt.
// Another local actor's valid token is EFORBIDDEN and no failed attempt:
// an application serving many actors from one address holds many tokens.
func (a Auth) Authenticate(r *http.Request, name, tok string) (*store.Actor, error) {
	if wait := a.Failures.Wait(r.RemoteAddr); wait > 0 {
		return nil, &RetryError{Wait: wait, Err: store.Errorf(EThrottled,
			"too many failed token attempts from this address; retry in %ss", limit.RetryAfter(wait))}
	}
	act, err := a.Store.Authenticate(r.Context(), name, tok)
	if store.ErrorCode(err) != store.EUNAUTHORIZED {
		return act, err
	}
	other, err2 := a.Store.TokenOwner(r.Context(), tok)
	switch {
	case err2 == nil:
		return nil, store.Errorf(store.EFORBIDDEN, "the token is %s's, not %s's", other, name)
	case store.ErrorCode(err2) != store.ENOTFOUND:
		return nil, err2
	}
	a.Failures.Failed(r.RemoteAddr)
	return nil, err
}
