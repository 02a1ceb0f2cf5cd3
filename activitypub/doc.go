// Package activitypub is courier's ActivityPub layer: the vocabulary and its
// tolerant JSON decoding, deterministic activity ids, RSA keys, HTTP
// signatures (draft-cavage, signed with github.com/go-fed/httpsig and verified
// with the checks that library leaves to its caller), a dialer that refuses
// non-global addresses, signed fetches of remote actors and keys, and the
// WebFinger, host-meta and NodeInfo documents.
//
// Fetch failures are told apart by Temporary: a busy fetch gate, a
// timeout, a network failure or a 5xx, 408 or 429 may pass and defers the
// work that needs the fetch; anything else the remote answered is final.
// A Resolver holds an actor fetched for a signature's key in memory until
// Verified says a signature verified with it, and only then stores it;
// failed key resolutions are remembered per key id (GoneTTL, FailTTL), and
// concurrent resolutions of one key share one fetch. A FetchHook carried by
// the context lets the caller charge each fetch before it is sent.
//
// It imports no other package of courier. Consumers declare the interfaces
// they need; this package declares ActorStore, the cache a Resolver uses.
package activitypub
