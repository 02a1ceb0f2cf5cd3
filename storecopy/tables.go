package storecopy

// table is one table of courier's schema as the copy knows it.
type table struct {
	name string
	// replace marks a table that is kept on write from the rows of another
	// table (event_queue_counts and event_queue_count_deltas, by Enqueue and
	// event_queue's triggers; delivery_health_epoch, by delivery_hosts'
	// triggers; remote_tombstone_counts, by the store beside
	// remote_tombstones): it is replaced wholesale by the source's rows once the
	// others are copied, rather than copied row by row.
	replace bool
}

// tables is every table the migrations create, in the order the copy
// fills them: a table comes after every table its foreign keys reference.
// A table of the source or of the target that is not here stops the copy
// before it writes anything (TestTablesAreTheMigrations holds this list to
// the migrations), so a new migration's table cannot be left behind.
// schema_migrations is not here: the target is migrated, not copied into.
var tables = []table{
	// package store: actors and what hangs off them (foreign keys to actors).
	{name: "actors"},
	{name: "actor_moves"},
	{name: "remote_moves"},
	{name: "deleted_actors"},
	{name: "instance_actor"},
	{name: "instance_base_url"},
	{name: "objects"},
	{name: "object_tags"},
	{name: "poll_votes"},
	{name: "activities"},
	{name: "followers"},
	{name: "following"},
	{name: "blocks"},
	{name: "domain_blocks"},
	{name: "reactions"},
	{name: "emoji_reactions"},
	{name: "featured"},
	{name: "actor_quote_policies"},
	{name: "quote_stamps"},
	{name: "quote_requests"},
	{name: "remote_actors"},
	{name: "relays"},
	{name: "remote_tombstones"},
	{name: "remote_tombstone_counts", replace: true},
	// package outbox: the queue, its payloads, its counts and the ledger.
	{name: "event_queue"},
	{name: "event_payloads"},
	{name: "event_queue_counts", replace: true},
	{name: "event_queue_count_deltas", replace: true},
	{name: "processed_events"},
	// package delivery.
	{name: "delivery_targets"},
	{name: "delivery_attempts"},
	{name: "delivery_hosts"},
	{name: "delivery_health_epoch", replace: true},
	{name: "delivery_signature_schemes"},
	{name: "delivery_processes"},
	{name: "delivery_outcomes"},
	{name: "delivery_outcome_counts"},
	// package inbox and outbox/natsbus.
	{name: "inbox_activities"},
	{name: "forwards"},
	{name: "jetstream_exhausted"},
	// package app: the inbox view and its per-actor counters.
	{name: "app_inbox_counters"},
	{name: "app_inbox_items"},
	// package app: the outbox view and its per-actor counters.
	{name: "app_outbox_counters"},
	{name: "app_outbox_items"},
	// package app/webhook.
	{name: "webhook_endpoints"},
	{name: "webhook_secrets"},
}

// migrationsTable is the runner's own table, migrated on the target rather
// than copied.
const migrationsTable = "schema_migrations"
