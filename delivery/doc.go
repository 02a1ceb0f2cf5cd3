// Package delivery gets courier's outgoing activities into every remote
// inbox that should see them.
//
// Two outbox handlers do the work. The fan-out handler (HandlerFanout, for
// activitypub.EventOutgoing events) takes the activity the event carries,
// checks that its id is the one derived from the event, stores it (upsert
// by id), resolves its audience to inboxes (followers expand to their
// inboxes, preferring shared inboxes; named actors are resolved through a
// TTL cache; as:Public, local actors, blocked actors and blocked domains
// are never targets), and enqueues one EventPost child per inbox in one
// transaction, with ids outbox.ChildID(parent, inbox) so a re-run creates
// nothing new. The forward handler (HandlerForward, for
// activitypub.EventForward events the inbox enqueues) does the same for an
// inbound activity courier forwards (forward.go): its local actors'
// followers, never the hosts of its actor and sender, its POSTs carrying
// the bytes received (store.ForwardDocument). The post handler (HandlerPost) signs and POSTs the exact
// stored bytes to one inbox, classifies the answer (Classify), records the
// attempt, and keeps the health of the inbox's host: a host that fails for
// longer than Config.UnavailableAfter is marked unavailable, its
// deliveries are parked without spending attempts while one probe delivery
// at a time tests it on a growing interval, and a success releases them
// all at once. A POST not answered within Config.HandOff goes on without
// its handler (flight.go), and a fan-out to more than Config.BulkFanout
// inboxes puts its deliveries in outbox.LaneBulk, behind interactive work.
// Other kinds of delivery target, which other packages register
// (Config.Channels, channel.go), go the post handler's way with requests
// of their own: delivery knows their targets only by asking them.
//
// # One delivery's way
//
// The fan-out handler reads the activity from the event alone, resolves
// to and cc (followers give one shared inbox per host; named actors go
// through the Resolver), and enqueues one EventPost child per inbox with id
// outbox.ChildID(parent, inbox) and Target = host, conflict-ignored, in one
// transaction.
//
// Each EventPost is claimed like any event (on the JetStream bus a
// deferral, such as a parked host, hands the event back to the outbox
// rather than spending a delivery). Its handler checks the host's health
// (parked hosts defer without spending attempts; one probe at a time), then
// takes a per-host slot (up to PerHostConcurrency, 4): a delivery that
// finds its host's POSTs in flight on every connection the host has waits
// for one to end and reuses its connection, and opens another beside them
// only once the newest has gone unanswered for SlotWait/5, 100 ms, so a
// host's concurrency ramps up only when its deliveries queue or it answers
// slowly (post.go). It signs the stored bytes on one of one-per-core CPU
// slots and sends the POST as a flight (flight.go, on goroutines kept for
// reuse): draft-cavage (activitypub.SignRequest, rsa-sha256,
// (request-target) host date digest content-type) to a host courier knows
// nothing of, RFC 9421 (activitypub.SignMessage, Ed25519 then RSA) to a
// host known to take it; a 400 or 401 signs again at once with the next
// scheme, and what the host accepted is kept in delivery_signature_schemes
// (scheme.go, migration 0013), which the inbox also feeds with every
// verified RFC 9421 sender.
//
// The handler waits up to HandOff (250 ms) for the answer. A host that has
// not answered by then no longer holds the handler: the row is deferred
// without spending an attempt, the POST goes on by itself (at most
// MaxInFlight, 4096, in the air), and the host's other deliveries wait for
// its answer instead of taking handler slots. When the flight lands,
// Classify turns the answer into delivered, retry (backoff, Retry-After as
// a lower bound) or permanent; the host's health is updated (a timeout or
// refusal makes it failing at once: one delivery in flight, the rest
// deferred on its backoff without spending attempts; an answer releases
// them); the attempt is recorded; and the row is made due
// (Queue.ReleaseEvents, all landed in a tick at once). Its next run returns
// the flight's outcome without sending again. A flight's outcome lives in
// the memory of the process that sent it: if that process dies first, the
// row comes back after Timeout + 5 s and is sent again. Waiting on remote
// hosts is bounded by sockets and memory; CPU work by the worker's handlers
// and the cores.
//
// # Order per (object, inbox)
//
// The fan-out records on each delivery an order key (what its activity is
// about, shared by an activity and its Undo) and a sequence (its parent's
// outbox row id). Before the health gate, a delivery reads its row and at
// most 16 nearest predecessors of its key to its inbox by index
// (order.go, migration 0032): while one is unsettled it is deferred
// without spending an attempt; a Create or Update whose object was deleted
// settles as superseded, unsent (docs/delivery.md).
//
// # Shared by every process
//
// Host health is shared by every process on the database through
// delivery_hosts (health.go). A delivery reads its host's row before it is
// sent (one primary-key read; a healthy row this process read or wrote
// stands for it while the count of hosts' bad news, delivery_health_epoch,
// kept by migration 0019's triggers and read at most once a second, has not
// moved since), and each change of health (a failure, a recovery, the claim
// of a failing host's one try or of an unavailable host's probe) is one
// transaction on the row, locked (FOR UPDATE on PostgreSQL; SQLite's one
// writer is alone). So a host one worker found dead is failing for every
// worker's next delivery, one delivery in any process tries it (the others
// defer on its backoff) or probes it, and one answer releases its parked
// deliveries for all.
//
// A healthy host's PerHostConcurrency is shared by the processes that
// deliver (processes.go, migration 0018): each keeps a row in
// delivery_processes (written every 10 s, deleted at stop, counted for
// 30 s) and takes its share, at least one POST (admin stats lists them).
//
// The client (activitypub.NewClient) keeps idle connections per host with
// no pool-wide cap (net/http's cap evicts connections a fan-out over
// thousands of hosts is about to reuse, and can fail a POST whose answer
// was already read), resumes TLS sessions from a cache, and uses HTTP/2
// where the host offers it.
package delivery
