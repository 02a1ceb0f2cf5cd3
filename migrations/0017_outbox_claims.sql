-- In step with PostgreSQL's 0017, which gives each lane's due rows an index
-- ordered as the claim reads them and leaves room in the ledger's pages for
-- its done marks. SQLite keeps its indexes: its claim names
-- event_queue_due and event_queue_due_interactive, and its writer was
-- measured with them.
SELECT 1;
