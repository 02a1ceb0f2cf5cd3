// Package sqlite opens courier's SQLite database with the settings every
// process needs: WAL, a busy timeout, foreign keys, durable commits, and a
// write discipline under which concurrent writers never see SQLITE_BUSY.
//
// Write discipline: all writes of a process go through DB.Write, a pool of
// exactly one connection whose transactions begin with BEGIN IMMEDIATE. Inside
// one process writers queue in Go for that connection; between processes (a
// server and a worker on one file) the IMMEDIATE lock is taken up front and
// waits out the busy timeout, so no transaction fails half-way on a lock
// upgrade. Reads use DB.Read, a pool of query-only connections that WAL lets
// run beside the writer.
//
// Durability: synchronous=FULL by default, so a commit that returned survives
// power loss. Options.Synchronous = "NORMAL" trades the last commits before a
// power loss (never corruption) for several times the commit rate.
//
// A new database file, its WAL and its shared-memory file are created 0600
// (FileMode): the database holds every local actor's private key.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	driver "modernc.org/sqlite" // the pure-Go driver, registered as "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/courier-ap/courier/sqldb"
)

// DriverName is the database/sql driver courier registers ("sqlite", the
// pure-Go modernc.org/sqlite), for tools that open a file directly.
const DriverName = "sqlite"

// Options tunes Open. The zero value is the production setting.
type Options struct {
	// Synchronous is SQLite's synchronous pragma for the writer: "FULL"
	// (default, durable across power loss) or "NORMAL" (faster; in WAL mode
	// the last transactions may roll back after a power loss).
	Synchronous string
	// BusyTimeout is how long a writer waits for another process's lock
	// (default 10 s).
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool (default 4).
	ReadConns int
	// Logger receives the warning about a database file that users other
	// than its owner can read (nil: discarded).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Synchronous == "" {
		o.Synchronous = "FULL"
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 10 * time.Second
	}
	if o.ReadConns <= 0 {
		o.ReadConns = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	switch o.Synchronous {
	case "FULL", "NORMAL", "EXTRA":
		return nil
	}
	return fmt.Errorf("sqlite: synchronous must be FULL, NORMAL or EXTRA, not %q", o.Synchronous)
}

// Open opens (creating if needed) the database at path. It fails with a clear
// error when the directory is missing or unwritable or the file is not a
// SQLite database.
func Open(ctx context.Context, path string, opts Options) (*sqldb.DB, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	if err := checkDir(path); err != nil {
		return nil, err
	}
	if err := createPrivate(path, opts.Logger); err != nil {
		return nil, err
	}
	base := "file:" + (&url.URL{Path: path}).EscapedPath()
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "journal_mode(WAL)")
	wq := cloneValues(q)
	wq.Add("_pragma", "synchronous("+opts.Synchronous+")")
	wq.Add("_pragma", "temp_store(MEMORY)") // statement journals stay off temporary files
	wq.Set("_txlock", "immediate")
	rq := cloneValues(q)
	rq.Add("_pragma", "query_only(1)")

	w, err := sql.Open(DriverName, base+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := probeWaiting(ctx, w, path, opts.BusyTimeout); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open(DriverName, base+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	r.SetMaxOpenConns(opts.ReadConns)
	r.SetMaxIdleConns(opts.ReadConns)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, err)
	}
	return sqldb.New(w, r, sqldb.SQLite, path, func() error { return errors.Join(r.Close(), w.Close()) }), nil
}

func cloneValues(v url.Values) url.Values {
	c := url.Values{}
	for k, vs := range v {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

func checkDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("sqlite: database directory %s: %w", dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return fmt.Errorf("sqlite: database directory %s is not a directory", dir)
	}
	return nil
}

// FileMode is the mode Open creates a new database file with: it holds
// every local actor's private key, so only its owner reads it. SQLite
// creates the WAL and shared-memory files with the database file's mode.
const FileMode os.FileMode = 0o600

// createPrivate creates the database file with FileMode when it does not
// exist yet (an empty file is a new database to SQLite), and warns about
// an existing database, WAL or shared-memory file that others can read.
func createPrivate(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	if err == nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("sqlite: create %s: %w", path, err)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil // SQLite cannot create it either, and says why below
	}
	if runtime.GOOS == "windows" {
		return nil // no Unix permission bits to check
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue // absent or not a file: Open reports it below
		}
		if mode := st.Mode().Perm(); mode&0o044 != 0 {
			log.Warn("sqlite: the database file is readable by other users, and it holds every local actor's private key; restrict it with chmod 600",
				"path", p, "mode", fmt.Sprintf("%04o", mode))
		}
	}
	return nil
}

// probeWaiting runs probe until it stops failing with SQLITE_BUSY, for at
// most bound. The first connection to a new file switches it to WAL, which
// takes the file's lock without the busy handler's wait: a server and a
// worker opening one new file at the same instant would otherwise see
// "database is locked" there, once in a few dozen tries.
func probeWaiting(ctx context.Context, db *sql.DB, path string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := probe(ctx, db, path)
		if err == nil || !isBusy(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var e *driver.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
}

// probe makes the first connection do real work, so that a corrupt file or
// an unwritable location fails here with its own message.
func probe(ctx context.Context, db *sql.DB, path string) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&n); err != nil {
		return fmt.Errorf("sqlite: %s is not a usable SQLite database: %w", path, err)
	}
	if mode != "wal" {
		return fmt.Errorf("sqlite: open %s: cannot enable WAL (journal_mode is %q); is the location writable?", path, mode)
	}
	// A write proves the file and its directory (for the WAL) are writable.
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS courier_probe (x INTEGER); DROP TABLE IF EXISTS courier_probe"); err != nil {
		return fmt.Errorf("sqlite: %s is not writable: %w", path, err)
	}
	return nil
}
