package server

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// KeyResolver resolves the key of a signed GET; *activitypub.Resolver
// implements it.
type KeyResolver interface {
	// Key returns the public key keyID and the id of the actor owning it;
	// refresh forces a refetch (rate-limited by the resolver).
	Key(ctx context.Context, keyID string, refresh bool) (crypto.PublicKey, string, error)
}

// signerKey is the context key of a verified signed GET's actor.
type signerKey struct{}

// signedBy returns the actor whose key signed r, verified: from the
// context when a document route verified it already, else by verifying
// it now. A request without a signature gives "" and nil; one whose
// signature fails gives an error (401). Without Config.Keys, signatures
// are not looked at.
func (s *Server) signedBy(r *http.Request) (string, error) {
	if v, ok := r.Context().Value(signerKey{}).(string); ok {
		return v, nil
	}
	if s.cfg.Keys == nil {
		return "", nil
	}
	sig, err := activitypub.RequestSignature(r)
	if errors.Is(err, activitypub.ErrNoSignature) {
		return "", nil
	}
	if err != nil {
		return "", store.Errorf(httpedge.ESignature, "signature: %v", err)
	}
	pub, owner, err := s.cfg.Keys.Key(r.Context(), sig.KeyID, false)
	if err != nil {
		return "", store.Errorf(httpedge.ESignature, "signature key %s: %v", sig.KeyID, err)
	}
	opts := activitypub.VerifyOptions{Now: s.cfg.Now}
	err = activitypub.VerifySignature(r, sig, nil, pub, opts)
	if errors.Is(err, activitypub.ErrBadSignature) {
		// The key may have been rotated: refetch once (rate-limited).
		if fresh, o, ferr := s.cfg.Keys.Key(r.Context(), sig.KeyID, true); ferr == nil {
			pub, owner = fresh, o
			err = activitypub.VerifySignature(r, sig, nil, pub, opts)
		}
	}
	if err != nil {
		return "", store.Errorf(httpedge.ESignature, "signature: %v", err)
	}
	if s.uris.IsLocal(owner) {
		return "", store.Errorf(httpedge.ESignature, "signature: a local key signs no GET from outside")
	}
	blocked, err := s.st.IsDomainBlocked(r.Context(), owner)
	if err != nil {
		return "", err
	}
	if blocked {
		return "", store.Errorf(store.EFORBIDDEN, "the domain of %s is blocked", owner)
	}
	return owner, nil
}

// doc wraps a document route. With Config.AuthorizedFetch, an ActivityPub
// request (not a browser's HTML one) must carry a signature that verifies,
// or, on an actor's own routes (/users/{name}/...), that actor's bearer
// token (throttled per address as every token check is); else 401. The
// verified signer is kept for visible.
func (s *Server) doc(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.AuthorizedFetch || negotiate(r.Header.Get("Accept")) == reprHTML {
			h(w, r)
			return
		}
		if tok, ok := httpedge.Bearer(r); ok {
			// An actor's client reading its own documents with its token.
			name := mux.Vars(r)["name"]
			if name == "" {
				httpedge.WriteError(w, r, s.log, store.Errorf(httpedge.ESignature, "authorized fetch: this server requires signed GETs"))
				return
			}
			if _, err := s.auth().Authenticate(r, name, tok); err != nil {
				httpedge.WriteError(w, r, s.log, err)
				return
			}
			h(w, r)
			return
		}
		signer, err := s.signedBy(r)
		if err == nil && signer == "" {
			err = store.Errorf(httpedge.ESignature, "authorized fetch: this server requires signed GETs")
		}
		if err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), signerKey{}, signer)))
	}
}

// signerMaySee reports whether the actor that signed r lives on a server
// one of whose actors may see a non-public item of author addressed to
// to and cc (Mastodon's rule): an addressee on the signer's origin, or,
// when the item is for author's followers, an accepted follower there.
func (s *Server) signerMaySee(r *http.Request, author *store.Actor, to, cc []string) (bool, error) {
	signer, err := s.signedBy(r)
	if err != nil || signer == "" {
		return false, err
	}
	origin, ok := originOf(signer)
	if !ok {
		return false, nil
	}
	followers := s.uris.Followers(author.Name)
	forFollowers := false
	for _, list := range [][]string{to, cc} {
		for _, a := range list {
			if a == followers {
				forFollowers = true
				continue
			}
			if o, ok := originOf(a); ok && o == origin {
				return true, nil
			}
		}
	}
	if !forFollowers {
		return false, nil
	}
	return s.st.HasFollowerOn(r.Context(), author.ID, origin)
}

// originOf returns scheme://host of an absolute http(s) URL.
func originOf(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", false
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), true
}

// audienceOf returns the to and cc of an activity document.
func audienceOf(doc []byte) (to, cc []string, err error) {
	a, err := activitypub.ParseActivity(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("server: stored activity: %w", err)
	}
	return a.To, a.Cc, nil
}
