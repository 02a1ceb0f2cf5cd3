package activitypub

import (
	"crypto/ed25519"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-fed/httpsig"
)

// Signer is a local actor's signing identity: the key id published in its
// actor document ({actor}#main-key) and the private key.
type Signer struct {
	// KeyID is the keyId written into signatures.
	KeyID string
	// Key is the actor's RSA private key.
	Key *rsa.PrivateKey
	// Ed25519KeyID and Ed25519 are the actor's Ed25519 key id
	// ({actor}#ed25519-key) and key, for RFC 9421 ed25519 signatures
	// (SignMessageEd25519); empty when the actor has none.
	Ed25519KeyID string
	Ed25519      ed25519.PrivateKey
}

// Sign signs req as s; see SignRequest.
func (s Signer) Sign(req *http.Request, body []byte, now time.Time) error {
	return SignRequest(req, body, s.KeyID, s.Key, now)
}

// Signed header lists, in the order courier signs them.
var (
	postHeaders      = []string{httpsig.RequestTarget, "host", "date", "digest", "content-type"}
	getHeaders       = []string{httpsig.RequestTarget, "host", "date"}
	getAcceptHeaders = []string{httpsig.RequestTarget, "host", "date", "accept"}
)

// ErrSign is returned (wrapped) when a request cannot be signed.
var ErrSign = errors.New("activitypub: sign")

// SignRequest signs req with an HTTP Signature (draft-cavage, rsa-sha256) as
// fediverse servers expect. It sets Date (from now), a Host header equal to
// the host the request goes to, and, when body is non-nil, Digest
// (SHA-256 of body) and a Content-Type (ContentType unless already set); it
// signs "(request-target) host date digest content-type" (and
// collection-synchronization when set: FEP-8fcf) for a request with
// a body and "(request-target) host date [accept]" without one. The
// (request-target) uses the path as sent on the wire (percent-encoding
// kept). The algorithm parameter says rsa-sha256, which strict verifiers
// require. Any earlier Digest or Signature header is replaced, so a request
// may be signed again (after a redirect, for the new URL).
//
// body must be the exact bytes sent as the request body; req.Body is not read.
func SignRequest(req *http.Request, body []byte, keyID string, key *rsa.PrivateKey, now time.Time) error {
	host, err := signTarget(req, keyID, key != nil)
	if err != nil {
		return err
	}
	req.Header.Del("Digest")
	req.Header.Del("Signature")
	req.Header["Host"] = []string{host}
	req.Header.Set("Date", now.UTC().Format(http.TimeFormat))

	headers := getHeaders
	if body != nil {
		headers = postHeaders
		if req.Header.Get(CollectionSyncHeader) != "" {
			headers = append(slices.Clip(postHeaders), "collection-synchronization")
		}
		if req.Header.Get("Content-Type") == "" {
			req.Header.Set("Content-Type", ContentType)
		}
	} else if req.Header.Get("Accept") != "" {
		headers = getAcceptHeaders
	}
	signer, _, err := httpsig.NewSigner([]httpsig.Algorithm{httpsig.RSA_SHA256}, httpsig.DigestSha256, headers, httpsig.Signature, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSign, err)
	}
	// httpsig builds (request-target) from URL.Path, the decoded path; sign
	// a shallow copy whose Path is the escaped path that goes on the wire.
	// The copy shares req.Header, so the headers land on req.
	u := *req.URL
	u.Path, u.RawPath = req.URL.EscapedPath(), ""
	cp := req.WithContext(req.Context())
	cp.URL = &u
	if err := signer.SignRequest(key, keyID, cp, body); err != nil {
		return fmt.Errorf("%w: %v", ErrSign, err)
	}
	sig := req.Header.Get("Signature")
	req.Header.Set("Signature", strings.Replace(sig, `algorithm="hs2019"`, `algorithm="rsa-sha256"`, 1))
	return nil
}

// signTarget checks what every signer needs (a request with a URL and a
// host, a key and its id), gives req a header map, and returns the host to
// sign.
func signTarget(req *http.Request, keyID string, haveKey bool) (string, error) {
	if req == nil || req.URL == nil {
		return "", fmt.Errorf("%w: nil request", ErrSign)
	}
	if !haveKey || keyID == "" {
		return "", fmt.Errorf("%w: no key", ErrSign)
	}
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if host == "" {
		return "", fmt.Errorf("%w: request has no host", ErrSign)
	}
	return host, nil
}
