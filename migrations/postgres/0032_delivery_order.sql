-- PostgreSQL twin of ../0032_delivery_order.sql: each delivery's order key
-- and sequence, and its state once settled without delivery.
ALTER TABLE delivery_targets ADD COLUMN order_key TEXT;
ALTER TABLE delivery_targets ADD COLUMN order_seq BIGINT;
ALTER TABLE delivery_targets ADD COLUMN order_kind TEXT CHECK (order_kind IN ('create', 'update'));
ALTER TABLE delivery_targets ADD COLUMN state TEXT CHECK (state IN ('superseded', 'dead'));

CREATE INDEX delivery_targets_order ON delivery_targets (order_key, inbox, order_seq)
    WHERE order_key IS NOT NULL;
