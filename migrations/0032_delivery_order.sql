-- Order per (object, inbox) (package delivery, order.go). The fan-out
-- records on each delivery the key of what its activity is about
-- (order_key: the object of a Create, Update, Delete, Add or Remove; the
-- actor, verb and object of a Follow, Like, Announce, EmojiReact or Block,
-- which its Undo shares) and its parent event's outbox row id (order_seq,
-- the order the activities were written in). A delivery waits while an
-- earlier one of the same key to the same inbox is unsettled; the index
-- finds its nearest predecessors without a scan.
--
-- order_kind marks a Create ('create': the first of its key, nothing
-- precedes it) or an Update ('update'): either is not sent once its object
-- is deleted. state is NULL while a delivery is open or was delivered, and
-- 'superseded' (not sent: its object was deleted first) or 'dead' (given
-- up) once it settled without delivery.
ALTER TABLE delivery_targets ADD COLUMN order_key TEXT;
ALTER TABLE delivery_targets ADD COLUMN order_seq INTEGER;
ALTER TABLE delivery_targets ADD COLUMN order_kind TEXT CHECK (order_kind IN ('create', 'update'));
ALTER TABLE delivery_targets ADD COLUMN state TEXT CHECK (state IN ('superseded', 'dead'));

CREATE INDEX delivery_targets_order ON delivery_targets (order_key, inbox, order_seq)
    WHERE order_key IS NOT NULL;
