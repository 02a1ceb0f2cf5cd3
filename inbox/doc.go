// Package inbox receives the activities remote servers POST to courier and
// imports them.
//
// Acceptance (Handler, mounted on POST /users/{name}/inbox and POST /inbox):
// a request must be addressed to courier (its Host that of the base URL,
// else 421), its sender's host must be within its budget of requests and
// bytes a minute (else 429 with Retry-After; only verified requests are
// charged), and it must carry an ActivityPub content type and a body of at most
// MaxBody bytes holding an activity with id, type and actor. A body that
// is not valid UTF-8 or holds a NUL character (\u0000), or whose URL
// fields (id, actor, object, inReplyTo, audience, attributedTo, tag hrefs,
// of the activity and of its object) hold a control character, is refused
// 400: SQLite would keep it, PostgreSQL refuses it, and a store copy from
// one to the other would stop on it (the store refuses such remote objects
// and actors too, EINVALID). Its draft-cavage
// HTTP Signature must sign (request-target), host, date and digest, its
// Digest must match the body and its Date lie within DateWindow. The key is
// resolved from the signature's keyId through the Resolver (a fetch of the
// actor or key document, signed by the Resolver's Fetcher as the instance
// actor, store.Instance.Signer: {base}/actor#main-key), kept in a small
// in-memory cache in front of the Resolver's own, and refetched once when a
// signature fails against a cached key (key rotation). The algorithm follows
// from the key, never from the header. The activity's actor must own the
// key; a Create or Update must carry an object of the actor's host
// attributed to the actor, a Delete must delete something of the actor's
// host, and the activity id itself must be on the actor's host; an activity
// claiming a local actor is refused before any fetch. Senders on
// blocked domains, and actors blocked by the local actor an activity is for,
// get 403. Whether a host is on a blocked domain is remembered per host
// until the next change of domain blocks made through the store (so a block
// made by this process applies to the next request) or for
// Config.DomainBlockTTL. What cannot be verified gets 401, never 202, so
// that peers that try an RFC 9421 signature first fall back to
// draft-cavage.
//
// Courier's own busyness is never a verdict on a request. When the key
// cannot be resolved now for a temporary reason (activitypub.Temporary: the
// fetch gate holds the key's host because it has fetches in flight or
// answered slowly, the fetch timed out, failed on the network or got a
// 5xx, 408 or 429), or the database is busy (SQLite BUSY or LOCKED,
// PostgreSQL serialization failure, deadlock, lock or connection limits),
// the request is deferred: 503 with Retry-After (the wait the gate or the
// remote gave, 1 s to 5 min) and a JSON error, counted in
// courier_inbox_deferred_total{reason} and against the host in the admin
// inbound view. 401 stays for what is wrong: a bad signature, a key the
// remote does not serve (404, 410, another 4xx, a document without it).
// Requests signed with one new key share one fetch of it (the Resolver
// waits up to KeyJoinWait for a fetch in flight); fetches of different
// actors of one host run side by side up to the gate's PerHost (8), and a
// burst beyond that is deferred, so ten people of one instance following
// at once all get their Accept.
//
// A key's fetch is paid for before it is made: each fetch the Resolver
// makes for a request's key, and the bytes it reads, are charged to the key
// host's key-fetch budget (as large as its request budget, and apart from
// it, so requests naming ever new keys of a host get 429 while the
// requests of keys courier holds go on). The actor fetched for a key is
// held in memory (bounded) and stored in remote_actors only once a
// signature verified with one of its keys; a stored document is at most
// store.MaxRemoteActorDocument, and Importer.Run deletes actors not fetched
// for Retention. A key resolution that failed for good (the document does
// not carry the key...) is remembered per key id for the Resolver's
// FailTTL, so repeated requests naming it cost one fetch.
//
// A verified activity that concerns no one here (see Handler.concerns: no
// local actor follows its sender, is addressed, mentioned or owns what it
// acts on, and it is no Follow of a local actor, no Delete of an object,
// no Update of something held, no Undo of a held activity) is answered 202
// and counted,
// and nothing is stored. Any other verified activity is recorded under its
// id (inbox_activities; the document is cleared once imported) and its
// inbox.received event enqueued, in one transaction shared with concurrent
// requests (group commit); the event id is derived from the activity id, so
// a repeated or racing duplicate records and enqueues nothing. The answer is
// 202 either way. Every failure is answered with {"error": "..."} and a
// specific status, and every result is counted (metrics.Inbox).
//
// A Delete of an actor whose key can no longer be fetched (410 or 404) is
// verified against the last key courier cached for that actor; when there is
// none it is answered 202 and dropped, as Mastodon does, since courier then
// holds nothing of that actor to delete.
//
// Import (Importer, the outbox handler "inbox.import" of inbox.received
// events) reads the recorded activity and applies it in one transaction with
// the mark that it was imported, so a replayed event, a redelivery or a
// crash never imports twice: Follow (follower stored, Accept enqueued unless
// the local actor approves followers by hand), Undo of Follow, Like,
// Announce and Block, Accept and Reject of local follows, Create and Update
// of notes (an older version never overwrites a newer one; an object a
// Delete named first is not stored: tombstone.go), Delete of an object
// (leaving a remote tombstone) or an actor, Like and Announce of local
// notes, and Block. Other types are recorded and acknowledged. In the same
// transaction, a stored public reply to a local note, or an activity
// addressed to a local followers collection that reaches something local,
// is forwarded to those followers when it carries an FEP-8b32 proof or an
// LD signature (forward.go: its bytes kept, an activitypub.EventForward
// enqueued once).
//
// An activity carrying FEP-8b32 eddsa-jcs-2022 proofs has each verified
// on acceptance (proof.go): a failing one is refused 401 (bad_proof), and
// one by its actor's key lets it in when another server delivered it (the
// HTTP signer need not be its actor).
//
// A verified POST carrying a signed Collection-Synchronization header
// (FEP-8fcf) about its actor's followers is compared with the local actors
// that follow that actor here; a difference enqueues one followers
// synchronization per remote server and window (followsync.go).
//
// # Before and after the record
//
// Before recording, a request whose remote host is over its budget gets
// 429 with Retry-After (budget.go), and an activity that concerns no one
// here is answered 202 and counted, not recorded (relevance.go). What an
// activity names only by reference (a Create's object URI, the original of
// an Announce by a followed actor or an accepted relay) is fetched by the
// import handler before its transaction (deref.go), one bounded fetch from
// the object's own origin, never on the request path; what relays send is
// in relay.go. A Follow's Accept is enqueued in the same transaction as the
// follower row. The import clears the recorded document (the row stays for
// duplicate detection); a remote object's text lives only in
// objects.document (migration 0012).
package inbox
