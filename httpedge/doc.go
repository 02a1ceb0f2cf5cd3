// Package httpedge is the HTTP edge every courier surface shares (server,
// app, inbox, admin): error codes and the one function that maps them to
// HTTP statuses, the JSON writer and the JSON error writer, the bearer-token
// check with its one throttle of failed tokens per client address, and the
// keyset cursor parser of collections.
//
// Errors carry a store.Code; Status is the only place a code becomes a
// status. WriteError answers an error as {"error": "..."}: an internal
// error is logged and shown as "internal error", EUNAUTHORIZED carries
// WWW-Authenticate, a temporary condition on courier's side is 503 with
// Retry-After (30 s, or the wait of a Retrier).
//
// Auth checks a bearer token as an actor's: a wrong token counts as a
// failed attempt of the client's address (limit.Failures), and an address
// that has used up its attempts is 429 with Retry-After; another local
// actor's valid token is 403 and no failed attempt (an application serving
// many actors from one address holds many tokens).
package httpedge
