// Package activitypub is courier's ActivityPub layer: the vocabulary and its
// tolerant JSON decoding, deterministic activity ids, RSA keys, HTTP
// signatures (draft-cavage, signed with github.com/go-fed/httpsig and verified
// with the checks that library leaves to its caller), a dialer that refuses
// non-global addresses, signed fetches of remote actors and keys, and the
// WebFinger, host-meta and NodeInfo documents.
//
// It imports no other package of courier. Consumers declare the interfaces
// they need; this package declares ActorStore, the cache a Resolver uses.
package activitypub
