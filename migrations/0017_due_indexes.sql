-- In step with PostgreSQL's 0017, which gives each lane's due rows an index
-- ordered as the claim reads them. SQLite keeps the indexes it has: its
-- claim names event_queue_due and event_queue_due_interactive, and its
-- planner and writer were measured with them.
SELECT 1;
