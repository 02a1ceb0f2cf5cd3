package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestActivityHook: the hooks registered with OnActivityTx run once per
// activity a local actor writes, inside the write's transaction (a hook's
// error rolls the write back, the activity and its outbox event with it),
// and not again for an activity stored already (an inbound event imported
// twice).
func TestActivityHook(t *testing.T) {
	b := setup(t)
	alice := b.actor(t, "alice")
	var mu sync.Mutex
	var seen []string
	var fail error
	b.store.OnActivityTx(func(ctx context.Context, tx *sql.Tx, a *Activity) error {
		// The activity is visible in the hook's transaction.
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM activities WHERE uri = ?`, a.URI).Scan(&n); err != nil || n != 1 {
			t.Errorf("hook of %s: %d rows (%v)", a.URI, n, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			return fail
		}
		seen = append(seen, a.Type+" "+a.URI)
		return nil
	})
	create, note, err := createNote(b.ctx, b.store, alice, noteInput{Content: "hi", To: []string{Public}})
	if err != nil {
		t.Fatal(err)
	}
	eventID := b.store.newEvent().ID
	accept := func() (*Activity, bool, error) {
		var act *Activity
		var isNew bool
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			act, isNew, err = b.store.EnqueueEventActivityTx(b.ctx, tx, eventID, time.Time{}, alice, "Accept",
				"https://remote.test/follows/1", []string{"https://remote.test/users/bob"}, nil)
			return err
		})
		return act, isNew, err
	}
	acc, isNew, err := accept()
	if err != nil || !isNew {
		t.Fatalf("Accept: %v %v", isNew, err)
	}
	if _, isNew, err := accept(); err != nil || isNew {
		t.Fatalf("Accept again: new %v, %v", isNew, err)
	}
	want := []string{"Create " + create.URI, "Accept " + acc.URI}
	mu.Lock()
	if len(seen) != len(want) || seen[0] != want[0] || seen[1] != want[1] {
		t.Errorf("hooks saw %q, want %q", seen, want)
	}
	fail = errors.New("refused")
	mu.Unlock()
	acts, events := b.count(t, `SELECT COUNT(*) FROM activities`), b.count(t, `SELECT COUNT(*) FROM event_queue`)
	if _, err := b.store.DeleteObject(b.ctx, alice, note.URI); err == nil || !errors.Is(err, fail) {
		t.Fatalf("a write whose hook fails: %v", err)
	}
	if a, e := b.count(t, `SELECT COUNT(*) FROM activities`), b.count(t, `SELECT COUNT(*) FROM event_queue`); a != acts || e != events {
		t.Errorf("a failed hook left %d activities and %d events, had %d and %d", a, e, acts, events)
	}
	if o, err := b.store.ObjectByURI(b.ctx, note.URI); err != nil || o.Deleted() {
		t.Errorf("the note after a failed delete: %+v %v", o, err)
	}
}
