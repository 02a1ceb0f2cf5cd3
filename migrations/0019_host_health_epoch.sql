-- Bad news of remote hosts, counted: every change of a delivery_hosts row
-- from healthy (not failing, not paused) to failing, unavailable or paused,
-- by any process or by hand, adds one to delivery_health_epoch in the
-- changing transaction. A process keeps the healthy rows it read in memory
-- and takes them for the rows while the sum it last read (at most a second
-- ago) is the sum it had read before reading them (package delivery,
-- Health): one read a second per process instead of one per delivery,
-- and a host marked down or paused by another process is seen within that
-- second. The count is kept in shards, one per writer where writers run
-- side by side (PostgreSQL); SQLite's one writer uses shard 0.
CREATE TABLE delivery_health_epoch (
    shard INTEGER PRIMARY KEY,
    n     INTEGER NOT NULL
);

CREATE TRIGGER delivery_hosts_down_insert AFTER INSERT ON delivery_hosts
WHEN NEW.state <> 'healthy' OR NEW.consecutive_failures > 0 OR NEW.paused_at IS NOT NULL
BEGIN
    INSERT INTO delivery_health_epoch (shard, n) VALUES (0, 1)
    ON CONFLICT (shard) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER delivery_hosts_down_update AFTER UPDATE ON delivery_hosts
WHEN (NEW.state <> 'healthy' OR NEW.consecutive_failures > 0 OR NEW.paused_at IS NOT NULL)
 AND NOT (OLD.state <> 'healthy' OR OLD.consecutive_failures > 0 OR OLD.paused_at IS NOT NULL)
BEGIN
    INSERT INTO delivery_health_epoch (shard, n) VALUES (0, 1)
    ON CONFLICT (shard) DO UPDATE SET n = n + 1;
END;
