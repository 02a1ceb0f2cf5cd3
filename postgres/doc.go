// Package postgres opens courier's PostgreSQL database, the store for running
// courier on more than one machine (several servers and workers sharing one
// database), beside the embedded SQLite default of package sqlite.
//
// A --db setting that is a postgres:// or postgresql:// URL selects it
// (IsURL); anything else is a SQLite file path. The driver is
// github.com/jackc/pgx/v5 behind database/sql, so the packages that own the
// tables keep one *sql.DB-shaped API for both stores and differ only in the
// statements whose dialects disagree.
//
// # The driver
//
// Its driver (driver.go) numbers the ? placeholders courier's SQL is
// written with (rebind.go) and passes bools as 0/1. It holds a
// transaction's sqldb.Deferred statements (statements whose result nobody
// reads: outbox.Enqueue's inserts of events with ids drawn there, and its
// counts) and sends them, in order, in one pipeline with the transaction's
// next statement or its COMMIT, and it has a transaction that inserted into
// event_queue send a debounced NOTIFY courier_events in its commit's
// pipeline, so a one-event enqueue costs its transaction no round trip.
// Listen (listen.go) wakes the OnWrite hooks on other processes'
// announcements.
//
// postgres/pgtest is a throwaway cluster for tests: initdb on a loopback
// port, a database per test, COURIER_TEST_POSTGRES to use another server.
package postgres
