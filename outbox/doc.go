// Package outbox is courier's transactional outbox: events are inserted in the
// same transaction as the data that caused them (Enqueue), then claimed by a
// bus (the db worker, or the JetStream relay and consumer) and run through the
// processed-events ledger, so that no two deliveries run the same handler for
// the same event at once and a crash never loses an event.
//
// outbox knows events and SQL; it knows nothing of ActivityPub. Of courier's
// packages it imports only sqldb (DialectOf); metrics reach it through
// Observer.
//
// # What is here
//
// Event; Enqueue, the only insert path (TestOnlyEnqueueInsertsOutboxRows
// holds every other code to it); Backoff; the ledger (ledger.go); the Runner
// both buses share (runner.go); the db worker (worker.go); Queue's row
// operations (claim, settle, hand back, admin); Sweeper. The statements
// whose dialects differ sit side by side in queue.go (dialectSQL): the
// claim's FOR UPDATE SKIP LOCKED selections (on PostgreSQL one statement,
// sqlPostgresClaim), the ledger sweep, the count fold, the oldest due row.
//
// # An event's way through
//
// A write's transaction calls Enqueue with its events; a payload over
// InlinePayload (256 B) is stored in event_payloads beside its row
// (migration 0008), so the row that claims and completions rewrite stays
// narrow; readers resolve either place (the event_queue_payloads view is
// for people). The commit's hook wakes the worker.
//
// The worker (Worker, or with EVENT_BUS_BACKEND=nats the natsbus relay
// publishing with Nats-Msg-Id = event id, and its consumer) claims the row
// and asks the Runner to run its handlers. The relay claims by id on the
// writer (Queue.SettleAndClaimIDs, settling the previous batch in the same
// transaction) and reads the claimed rows on its publishing goroutine from
// the read pool (Queue.Load), so the one writer only changes statuses. The
// Runner claims (event_id, handler) in processed_events, runs the handler,
// and marks it done or releases it, conditioned on started_at.
//
// # Rules and where they live
//
//   - Writes atomic with their events, one insert path: the store's methods
//     and Enqueue (event.go).
//   - Conflict-ignore on deterministic ids: Enqueue inserts an event given an
//     id with ON CONFLICT (event_id) DO NOTHING (an id Enqueue draws at
//     random is inserted without the check); ChildID derives a child's id.
//   - Backoff 5 s doubling, capped at 300 s, one function: Backoff; natsbus
//     naks with it.
//   - Max attempts, then dead letter: the settle of worker.go; JetStream's
//     max_deliver in natsbus.
//   - Lease (600 s) and reclaim: Queue.Claim. On PostgreSQL every id
//     selection of a claim is FOR UPDATE SKIP LOCKED, so workers and relays
//     in any number of processes claim disjoint rows (NewQueue takes the
//     dialect of the pool it is given, sqldb.DialectOf): SQLite runs the
//     selections and the update one by one (sqlSelectDueIDs, sqlRangeClaim),
//     PostgreSQL all in one statement that returns the rows in claim order
//     (sqlPostgresClaim), over an index per lane ordered as it reads them and
//     an index of claimed rows ordered by (claimed_at, id) (migration 0017).
//     The db worker frees a row's slot once its handler has run, so its next
//     claim runs beside the settle of the previous rows; its completer
//     settles what has finished in one transaction, waiting up to 20 ms for
//     a group of 64 while handlers still hold rows (Worker.complete).
//   - Ledger claim, takeover after 1800 s, owner token, defer, read error:
//     ledger.go and runner.go. Every ledger write is conditional (insert ON
//     CONFLICT DO NOTHING, takeover on the started_at read); a batch's claims
//     are inserted first and only those an insert did not write (run before,
//     or claimed by a concurrent transaction) are read and judged one by one;
//     claims written for an event whose ledger read failed are released. On
//     PostgreSQL the ledger's pages leave room (fillfactor 60, migration
//     0017) so the done marks stay HOT.
//   - Scrape and admin reads independent of history: event_queue_counts,
//     kept on write (migration 0014), sharded by migration 0016 (PostgreSQL:
//     one shard per database backend, so concurrent writers of a type never
//     wait for one counter row, written by statement triggers over
//     transition tables, one count per (status, type) a statement changed;
//     SQLite: shard 0, row triggers), summed by Queue.Stats, ended backends'
//     shards folded into shard 0 by Queue.Sweep. Since migration 0020 new
//     rows are counted by Enqueue itself, one row per type appended to
//     event_queue_count_deltas in its transaction (on PostgreSQL deferred into
//     the COMMIT's pipeline; no insert trigger, no hot counter row), summed by
//     Queue.Stats with the table and folded into shard 0 every 5 s by
//     Queue.FoldCounts (the sweeper; on PostgreSQL one statement that deletes
//     exactly what it adds); the status and delete triggers add to a count
//     whether or not its insert is folded yet. Open rows have partial
//     indexes, event_queue_open and event_queue_target_open (queries name
//     status <> 'done', Filter); on PostgreSQL one per status instead of
//     event_queue_open (event_queue_pending, event_queue_claimed,
//     event_queue_dead, migration 0017), which a claim does not write twice,
//     and Filter.whereOf writes the status into the statement so generic
//     plans read them too; delivery_targets_parked likewise.
//   - Ledger and done-row retention: Queue.Sweep, run by a Sweeper (inside
//     the db worker; beside the nats bus).
//   - The relay claims rows, publishes with Nats-Msg-Id, marks done after the
//     ack and defers on an outage without spending attempts: natsbus's relay
//     (Queue.SettleAndClaimIDs: settle and claim in one transaction;
//     Queue.Load).
//   - Deferral without spending an attempt: on the db bus Queue reschedules
//     the row; on JetStream the consumer hands the event back to the outbox
//     (Queue.HandBack) instead of a nak, which would count toward
//     max_deliver.
//   - Duplicate window of 1 h, reconcile in place, advisories: natsbus.
//
// # Lanes
//
// Every row has a lane (lane.go, migration 0010). Fan-outs to more than
// delivery's BulkFanout (100) inboxes put their deliveries in the bulk lane;
// everything else (imports, fan-outs, an Accept, a reply, a direct message)
// is interactive. A claim takes due interactive rows first and gives bulk
// rows at least a quarter of it when they are due, and the db worker's
// handlers take the interactive rows it holds before its bulk ones
// (worker.go, handOut), so an Accept is never queued behind a
// 100,000-delivery fan-out, and the fan-out keeps moving. The admin API
// shows each event's lane. On the JetStream bus the relay publishes in that
// order, but messages already in the stream are consumed in stream order.
//
// # One event, from write to remote inbox
//
//  1. POST /users/alice/outbox (server) checks the bearer token (httpedge)
//     and calls one store method, e.g. store.CreateObject.
//  2. The store opens one write transaction (sqldb.DB.Tx): it picks the event
//     id, builds the Create with an id derived from it
//     (activitypub.NewActivity), writes the object and the activity, and calls
//     Enqueue with an activity.outgoing event carrying the activity's bytes.
//     Commit wakes the worker; 201 + Location.
//  3. The worker (Worker, or the natsbus relay and consumer) claims the row;
//     the Runner claims (event, handler) in the processed_events ledger,
//     runs the handler, marks it done.
//  4. delivery's fan-out handler resolves to/cc to inboxes (one shared inbox
//     per host) and enqueues one delivery.post child per inbox, id
//     ChildID(parent, inbox), in one transaction.
//  5. Each delivery.post checks its host's health (a parked host defers
//     without spending an attempt), takes a per-host slot, signs the stored
//     bytes and POSTs them as a flight; after 250 ms unanswered the flight
//     goes on without the handler. The answer is classified (delivered,
//     retry with backoff, permanent), the host's health and the attempt
//     recorded, the row settled.
//  6. Inbound is the mirror: inbox verifies a POST, records the activity and
//     enqueues inbox.received (id derived from the activity id) in one
//     transaction, answers 202; the import handler applies it once under the
//     ledger, e.g. a Follow's follower row and its Accept in one transaction,
//     and in that transaction appends it to the concerned actors' inbox
//     views (app), whose hooks enqueue their webhooks (app/webhook),
//     delivered like any outbox event.
package outbox
