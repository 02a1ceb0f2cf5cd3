-- PostgreSQL twin of ../0017_outbox_claims.sql: each lane's due rows get an
-- index of their own, ordered as the claim reads them (next_attempt_at,
-- then id).
--
-- The bulk lane's claim went through event_queue_due, the index of every
-- pending row, filtering lane <> 0: with a backlog of interactive rows and
-- no bulk row due, each claim walked the whole backlog to return nothing.
-- The interactive claim's index lacked the id its ORDER BY ends with, so
-- each claim sorted every row of the first due time. An enqueue of an
-- interactive row now writes one due index instead of two.
DROP INDEX event_queue_due;
DROP INDEX event_queue_due_interactive;

CREATE INDEX event_queue_due_interactive ON event_queue (next_attempt_at, id)
WHERE status = 'pending' AND lane = 0;

CREATE INDEX event_queue_due_bulk ON event_queue (next_attempt_at, id)
WHERE status = 'pending' AND lane <> 0;

-- The claim takes expired claims back in (claimed_at, id) order. Without
-- the id in the index of claimed rows the planner read that order from
-- event_queue_open instead, through every row being processed.
DROP INDEX event_queue_claimed;
CREATE INDEX event_queue_claimed ON event_queue (claimed_at, id) WHERE status = 'processing';

-- The open rows' index of migration 0014 held every row not done, keyed by
-- (status, id): a claim, which moves a row from pending to processing,
-- wrote an entry there besides the one in event_queue_claimed (the claim
-- of 100 rows took 5-7 ms with it, 3-4 ms without, on the same backlog).
-- The lists and counts of open rows (outbox.Filter) read the index of
-- their status instead: pending rows this one, in id order; rows being
-- processed event_queue_claimed; dead letters event_queue_dead. None of
-- them holds a done row, so their cost still does not grow with history.
DROP INDEX event_queue_open;
CREATE INDEX event_queue_pending ON event_queue (id) WHERE status = 'pending';

-- A ledger claim is inserted, then marked done by an update that changes
-- no indexed column: with room left on its page the update stays there
-- (HOT) and writes no index. Full pages (the default fillfactor, 100) made
-- nearly every mark a new version in another page, with an entry in both
-- indexes. Existing pages keep their layout; new ones leave the room.
ALTER TABLE processed_events SET (fillfactor = 60);
