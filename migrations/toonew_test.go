package migrations_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqlite"
)

// TestTooNewRefused records a version this binary does not know, on a
// database with every migration applied and on one with all of them
// pending: Apply refuses both with ErrTooNew and applies nothing.
func TestTooNewRefused(t *testing.T) {
	t.Parallel()
	future := migrations.Latest() + 1
	for _, migrated := range []bool{true, false} {
		ctx := context.Background()
		db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "courier.db"), sqlite.Options{Synchronous: "NORMAL"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if migrated {
			if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
				t.Fatal(err)
			}
		} else if _, err := db.Write.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
			name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Write.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)`, future); err != nil {
			t.Fatal(err)
		}
		applied, err := migrations.Apply(ctx, db.Write, migrations.Options{})
		if !errors.Is(err, migrations.ErrTooNew) || len(applied) != 0 {
			t.Fatalf("migrated %v: applied %v, err %v; want nothing applied and ErrTooNew", migrated, applied, err)
		}
	}
}

// TestAllIsACopy changes what All returned and requires the next call to
// be unchanged.
func TestAllIsACopy(t *testing.T) {
	t.Parallel()
	ms, err := migrations.All()
	if err != nil || len(ms) == 0 {
		t.Fatalf("All: %d migrations, %v", len(ms), err)
	}
	want := ms[0]
	ms[0] = migrations.Migration{}
	again, err := migrations.All()
	if err != nil || again[0] != want {
		t.Fatalf("All after a change of its last result: %+v, %v; want %+v", again[0], err, want)
	}
	if got := migrations.Latest(); got != again[len(again)-1].Version {
		t.Fatalf("Latest %d, want %d", got, again[len(again)-1].Version)
	}
}
