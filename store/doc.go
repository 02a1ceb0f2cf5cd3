// Package store is courier's domain repository: local actors and their keys,
// the objects they publish (publish.go), the activities courier built,
// follow relationships, blocks, reactions, domain blocks and the remote
// actor cache.
//
// Every method that changes state and causes events writes the data and
// enqueues the events in one transaction through outbox.Enqueue: either it
// runs its own transaction (sqldb.DB.Tx) or it takes the caller's *sql.Tx
// (the methods named ...Tx). Use cases never open transactions themselves.
//
// A local write that federates enqueues one activitypub.EventOutgoing event
// per activity. The event id is chosen before the activity is built, the
// activity id is derived from it (activitypub.ActivityID), the activity's
// bytes are stored in the activities table, and the event's payload carries
// the actor and those bytes, so the delivery worker can deliver from the
// event alone. The activity's id is a UUIDv5 of the event id and the type
// (activitypub.NewActivity), and its published time is the event's time.
// An actor with an Ed25519 key signs each activity it builds with an
// FEP-8b32 eddsa-jcs-2022 proof (activitypub.AddProof, created at the
// event's time), once, before it is stored: retries send those bytes.
// Forwarded inbound activities keep their received bytes in forwards
// (RecordForwardTx).
//
// The social tables are here: actors, objects, activities, follows, blocks,
// reactions, domain blocks, the remote actor cache, the instance actor and
// relays.
//
// # Beside another server on one PostgreSQL
//
// Each write that decides on what it read is safe beside another server's
// on one PostgreSQL (READ COMMITTED): it is one conditional statement
// (INSERT ... ON CONFLICT ... RETURNING, UPDATE/DELETE ... WHERE <state>
// RETURNING), or it locks the rows it read (forUpdate: FOR NO KEY UPDATE on
// PostgreSQL, nothing on SQLite, whose writers are serial; forShare where it
// only adds beside them, as a reaction to an object); follows and blocks of
// one local actor lock its row (lockActorTx). concurrency_test.go tests them
// pair by pair on two pools.
//
// # Deleted actors
//
// A deleted local actor (DeleteActor) keeps its row and key while its
// Delete is being delivered; KeyReaper, run by every process, removes it
// once the command's check of the outbox ledger and delivery.Service.Status
// says every delivery finished or died. Its name is kept for good in
// deleted_actors (migration 0015): /users/NAME answers 410 Gone with a
// Tombstone (formerType Person) and WebFinger 410, before and after the
// removal, and CreateActor refuses the name (ECONFLICT), since peers keep
// the old actor and key cached.
package store
