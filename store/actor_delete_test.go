package store

import (
	"context"
	"errors"
	"testing"

	"github.com/courier-ap/courier/migrations"
)

// finishedDeliveries answers that every Delete is past delivery: alice
// has no followers, so hers has no delivery to wait for.
type finishedDeliveries struct{}

func (finishedDeliveries) DeliveryFinished(_ context.Context, _, _ string) (bool, error) {
	return true, nil
}

// TestDeletedActorNameKept: a deleted actor is recorded with its time,
// still after ReapDeletedActors removed its row; its name is refused to a
// new actor (ECONFLICT) while pending and after removal; a name never
// deleted is ENOTFOUND.
func TestDeletedActorNameKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actor(t, "alice")
	if _, err := b.store.DeletedActor(b.ctx, "alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a live actor is deleted: %v", err)
	}
	act, err := b.store.DeleteActor(b.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	at, err := b.store.DeletedActor(b.ctx, "alice")
	if err != nil || !at.Equal(act.Published) {
		t.Fatalf("deleted at %v (%v), want the Delete's time %v", at, err, act.Published)
	}
	for _, when := range []string{"pending", "removed"} {
		if when == "removed" {
			if n, err := b.store.ReapDeletedActors(b.ctx, finishedDeliveries{}); err != nil || n != 1 {
				t.Fatalf("reaped %d, %v", n, err)
			}
		}
		if _, _, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice"}); !errors.Is(err, ErrConflict) {
			t.Fatalf("%s: alice created again: %v", when, err)
		}
		if got, err := b.store.DeletedActor(b.ctx, "alice"); err != nil || !got.Equal(at) {
			t.Fatalf("%s: deleted at %v, %v", when, got, err)
		}
	}
	if _, err := b.store.DeletedActor(b.ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("never deleted: %v", err)
	}
}

// TestMigrationRecordsPendingDeletedActors: an actor deleted before
// migration 0015 (its row still marked deleted) is recorded by it.
func TestMigrationRecordsPendingDeletedActors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actor(t, "alice")
	b.actor(t, "bob")
	if _, err := b.store.DeleteActor(b.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP TABLE deleted_actors`,
		`ALTER TABLE delivery_signature_schemes DROP COLUMN no_fallback_until`,
		`DELETE FROM schema_migrations WHERE version = 15`,
	} {
		if _, err := b.db.Write.ExecContext(b.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := migrations.Apply(b.ctx, b.db.Write, migrationOptions()); err != nil || len(applied) != 1 || applied[0] != 15 {
		t.Fatalf("applied %v, %v; want [15]", applied, err)
	}
	if _, err := b.store.DeletedActor(b.ctx, "alice"); err != nil {
		t.Fatalf("alice after the migration: %v", err)
	}
	if _, err := b.store.DeletedActor(b.ctx, "bob"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob after the migration: %v", err)
	}
}
