//go:build unix

package sqlite_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/courier-ap/courier/sqlite"
)

// TestOpenCreatesPrivateFiles: under the common umask 022 a new database,
// its WAL and its shared-memory file are created 0600, since the database
// holds every local actor's private key. Not parallel: the umask is the
// process's.
func TestOpenCreatesPrivateFiles(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "courier.db")
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Write.ExecContext(ctx, "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		if mode := st.Mode().Perm(); mode != sqlite.FileMode {
			t.Errorf("%s created %04o, want %04o", filepath.Base(p), mode, sqlite.FileMode)
		}
	}
}

// TestOpenWarnsAboutAReadableFile: an existing database others can read
// opens, with a warning naming the file and its mode; a private one opens
// without it.
func TestOpenWarnsAboutAReadableFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "courier.db")
	db, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	db, err = sqlite.Open(ctx, path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if logs.Len() != 0 {
		t.Fatalf("warning about a private file: %s", logs.String())
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err = sqlite.Open(ctx, path, sqlite.Options{Logger: logger})
	if err != nil {
		t.Fatalf("a readable file must still open: %v", err)
	}
	db.Close()
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "readable by other users") ||
		!strings.Contains(out, "path="+path) || !strings.Contains(out, "mode=0644") {
		t.Fatalf("no warning naming the readable file: %q", out)
	}
}
