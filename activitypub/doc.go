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
//
// Keys are RSA, Ed25519 and FEP-521a Multikey. RFC 9421 HTTP Message
// Signatures are signed and verified in rfc9421.go and sfv.go;
// RequestSignature and VerifySignature dispatch on Signature-Input. Ids are
// deterministic (NewActivity, ActivityID), used by every producer.
//
// # Remote fetches
//
// Remote fetches (actors, keys, objects) never make many handlers wait on
// one slow host: the fetch client is gated (FetchGate: at most 8 fetches in
// flight per host; a host with a fetch in flight for 5 s, or that answered
// that slowly in the last minute, is refused at once with ErrHostBusy), and
// a caller of the Resolver that finds the same fetch in flight for 2 s gets
// ErrHostBusy instead of joining it (Actor then returns the stored copy; an
// actor's Update of itself is imported without its refresh). One handler
// waits on the slow host; the others go on.
package activitypub
