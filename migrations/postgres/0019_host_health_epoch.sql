-- PostgreSQL twin of ../0019_host_health_epoch.sql: bad news of remote
-- hosts counted in the changing transaction, in 16 shards so that
-- transactions of different backends marking hosts down at once seldom
-- wait for one another's count.
CREATE TABLE delivery_health_epoch (
    shard INTEGER PRIMARY KEY,
    n     BIGINT  NOT NULL
);

CREATE FUNCTION delivery_hosts_down() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_health_epoch (shard, n) VALUES (pg_backend_pid() % 16, 1)
    ON CONFLICT (shard) DO UPDATE SET n = delivery_health_epoch.n + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER delivery_hosts_down_insert AFTER INSERT ON delivery_hosts
FOR EACH ROW
WHEN (NEW.state <> 'healthy' OR NEW.consecutive_failures > 0 OR NEW.paused_at IS NOT NULL)
EXECUTE FUNCTION delivery_hosts_down();

CREATE TRIGGER delivery_hosts_down_update AFTER UPDATE ON delivery_hosts
FOR EACH ROW
WHEN ((NEW.state <> 'healthy' OR NEW.consecutive_failures > 0 OR NEW.paused_at IS NOT NULL)
  AND NOT (OLD.state <> 'healthy' OR OLD.consecutive_failures > 0 OR OLD.paused_at IS NOT NULL))
EXECUTE FUNCTION delivery_hosts_down();
