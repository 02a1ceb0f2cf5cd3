package activitypub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Followers synchronization (FEP-8fcf, as Mastodon does it since 3.3): a
// delivery of a followers-only activity to a shared inbox carries
//
//	Collection-Synchronization: collectionId="<followers>", url="<partial collection>", digest="<hex>"
//
// where digest is the XOR of the SHA-256 of the id of each follower on the
// receiving server (FollowersDigest), and the partial collection lists
// those followers only, to a signed GET from that server. The receiver
// compares the digest with what it holds and, when they differ, fetches
// the partial collection to repair the follows.

// CollectionSyncHeader is the header's name; the signature covers it
// (SignRequest, SignMessage) when a request carries it.
const CollectionSyncHeader = "Collection-Synchronization"

// CollectionSync is the content of a Collection-Synchronization header.
type CollectionSync struct {
	CollectionID string // the sender's followers collection
	URL          string // the partial collection of the receiver's followers
	Digest       string // FollowersDigest of them, lower-case hex
}

// ErrCollectionSync is returned (wrapped) for a malformed header.
var ErrCollectionSync = errors.New("activitypub: malformed Collection-Synchronization")

// String formats s as the header's value.
func (s CollectionSync) String() string {
	return `collectionId="` + s.CollectionID + `", url="` + s.URL + `", digest="` + s.Digest + `"`
}

// maxCollectionSync bounds the header parsed.
const maxCollectionSync = 4096

// ParseCollectionSync parses a Collection-Synchronization header value:
// comma-separated key="value" pairs (unknown keys ignored), collectionId
// and url absolute http(s) URLs, digest 64 hex digits.
func ParseCollectionSync(h string) (CollectionSync, error) {
	var s CollectionSync
	if len(h) > maxCollectionSync {
		return s, fmt.Errorf("%w: over %d bytes", ErrCollectionSync, maxCollectionSync)
	}
	rest := strings.TrimSpace(h)
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 || len(rest) < eq+2 || rest[eq+1] != '"' {
			return CollectionSync{}, fmt.Errorf("%w: expected key=\"value\"", ErrCollectionSync)
		}
		key := strings.TrimSpace(rest[:eq])
		end := strings.IndexByte(rest[eq+2:], '"')
		if end < 0 {
			return CollectionSync{}, fmt.Errorf("%w: unterminated value", ErrCollectionSync)
		}
		value := rest[eq+2 : eq+2+end]
		switch key {
		case "collectionId":
			s.CollectionID = value
		case "url":
			s.URL = value
		case "digest":
			s.Digest = strings.ToLower(value)
		}
		rest = strings.TrimSpace(rest[eq+2+end+1:])
		if rest != "" {
			if rest[0] != ',' {
				return CollectionSync{}, fmt.Errorf("%w: expected a comma", ErrCollectionSync)
			}
			rest = strings.TrimSpace(rest[1:])
		}
	}
	for name, v := range map[string]string{"collectionId": s.CollectionID, "url": s.URL} {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return CollectionSync{}, fmt.Errorf("%w: %s %q", ErrCollectionSync, name, v)
		}
	}
	if b, err := hex.DecodeString(s.Digest); err != nil || len(b) != sha256.Size {
		return CollectionSync{}, fmt.Errorf("%w: digest %q", ErrCollectionSync, s.Digest)
	}
	return s, nil
}

// FollowersDigest is the digest of a set of actor ids as FEP-8fcf and
// Mastodon compute it: the XOR of the SHA-256 of each id, in lower-case
// hex; 64 zeros for none. Order does not matter; an id given twice
// cancels out, so give each once.
func FollowersDigest(ids []string) string {
	var d [sha256.Size]byte
	for _, id := range ids {
		h := sha256.Sum256([]byte(id))
		for i := range d {
			d[i] ^= h[i]
		}
	}
	return hex.EncodeToString(d[:])
}

// URLPrefix is the scheme and authority of an http(s) URL, "https://host"
// (Mastodon's Account::URL_PREFIX_RE), or "" for anything else. The
// followers of a server are the ids OnPrefix accepts for it.
func URLPrefix(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// OnPrefix reports whether the actor id is on the server of prefix (a
// URLPrefix): it is prefix itself or lies under prefix + "/", as Mastodon
// selects a server's followers.
func OnPrefix(id, prefix string) bool {
	return prefix != "" && (id == prefix || strings.HasPrefix(id, prefix+"/"))
}
