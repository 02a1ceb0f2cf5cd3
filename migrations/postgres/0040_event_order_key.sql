-- The order key of an outgoing activity's event (package delivery,
-- order.go; the key its deliveries record in delivery_targets.order_key):
-- the fan-out of an activity waits while an earlier activity of the same
-- key has not been fanned out, so that its deliveries are never enqueued
-- before their predecessor's. The index finds the nearest earlier event of
-- a key without a scan.
ALTER TABLE event_queue ADD COLUMN order_key TEXT;

CREATE INDEX event_queue_order ON event_queue (order_key, id)
    WHERE order_key IS NOT NULL;
