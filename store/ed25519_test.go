package store

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/migrations"
)

// TestActorEd25519Key: a new actor gets an Ed25519 key, stored as its seed,
// read back equal, and published in its actor document as a Multikey in
// assertionMethod beside the RSA publicKey, with the Multikey context.
func TestActorEd25519Key(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	if len(a.Ed25519Key) != ed25519.PrivateKeySize {
		t.Fatalf("new actor has an Ed25519 key of %d bytes", len(a.Ed25519Key))
	}
	got, err := b.store.ActorByName(b.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Ed25519Key.Equal(a.Ed25519Key) {
		t.Fatal("the Ed25519 key read back differs")
	}
	if other := b.actor(t, "bob"); other.Ed25519Key.Equal(a.Ed25519Key) {
		t.Fatal("two actors share an Ed25519 key")
	}
	doc, err := b.store.ActorJSON(got)
	if err != nil {
		t.Fatal(err)
	}
	actor, err := activitypub.ParseActor(doc)
	if err != nil {
		t.Fatal(err)
	}
	if actor.PublicKey.ID != a.URI+"#main-key" {
		t.Fatalf("publicKey id %q", actor.PublicKey.ID)
	}
	var wire struct {
		Context         []any                  `json:"@context"`
		AssertionMethod []activitypub.Multikey `json:"assertionMethod"`
	}
	if err := json.Unmarshal(doc, &wire); err != nil {
		t.Fatal(err)
	}
	if len(wire.AssertionMethod) != 1 {
		t.Fatalf("assertionMethod %+v", wire.AssertionMethod)
	}
	mk := wire.AssertionMethod[0]
	if mk.ID != a.URI+"#ed25519-key" || mk.Type != "Multikey" || mk.Controller != a.URI {
		t.Fatalf("Multikey %+v", mk)
	}
	pub, err := activitypub.ParseEd25519Multibase(mk.PublicKeyMultibase)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(a.Ed25519Key.Public()) {
		t.Fatal("published Multikey is not the actor's key")
	}
	if !bytes.Contains(doc, []byte(`"`+activitypub.MultikeyContext+`"`)) {
		t.Fatalf("no Multikey context in %s", doc)
	}
	// A peer reading the document resolves both keys by their ids, each
	// owned by the actor.
	rsaPub, owner, err := activitypub.KeyOf(actor, a.URI+"#main-key")
	if err != nil || owner.ID != a.URI || rsaPub == nil {
		t.Fatalf("RSA key: %v, %v", rsaPub, err)
	}
	edPub, owner, err := activitypub.KeyOf(actor, a.URI+"#ed25519-key")
	if err != nil || owner.ID != a.URI {
		t.Fatalf("Ed25519 key: %v", err)
	}
	if k, ok := edPub.(ed25519.PublicKey); !ok || !k.Equal(a.Ed25519Key.Public()) {
		t.Fatalf("Ed25519 key resolved as %T %v", edPub, edPub)
	}
}

// TestMigrationGivesExistingActorsEd25519Keys: actors created before
// migration 0013 (the column dropped and the migration unrecorded, as on a
// database last migrated at 0009) each get a distinct 32-byte seed when
// the migrations run again.
func TestMigrationGivesExistingActorsEd25519Keys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actor(t, "alice")
	b.actor(t, "bob")
	for _, q := range []string{
		`ALTER TABLE actors DROP COLUMN ed25519_seed`,
		`DROP TABLE delivery_signature_schemes`,
		`DELETE FROM schema_migrations WHERE version = 13`,
	} {
		if _, err := b.db.Write.ExecContext(b.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := migrations.Apply(b.ctx, b.db.Write, migrationOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 || applied[0] != 13 {
		t.Fatalf("applied %v, want [13]", applied)
	}
	alice, err := b.store.ActorByName(b.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := b.store.ActorByName(b.ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if len(alice.Ed25519Key) != ed25519.PrivateKeySize || len(bob.Ed25519Key) != ed25519.PrivateKeySize {
		t.Fatalf("keys of %d and %d bytes after the migration", len(alice.Ed25519Key), len(bob.Ed25519Key))
	}
	if alice.Ed25519Key.Equal(bob.Ed25519Key) {
		t.Fatal("the migration gave two actors the same key")
	}
	// A seed of another length is refused by the column's CHECK.
	if _, err := b.db.Write.ExecContext(b.ctx, `UPDATE actors SET ed25519_seed = ? WHERE name = 'alice'`, []byte{0}); err == nil {
		t.Fatal("a 1-byte seed was stored")
	}
}

// TestRotateKeyRotatesEd25519: rotating an actor's key replaces its
// Ed25519 key too, stored and published in the Update the rotation sends;
// a profile change alone keeps it.
func TestRotateKeyRotatesEd25519(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	name := "Alice"
	kept, _, err := b.store.UpdateActor(b.ctx, "alice", ActorUpdate{DisplayName: &name})
	if err != nil {
		t.Fatal(err)
	}
	if !kept.Ed25519Key.Equal(a.Ed25519Key) {
		t.Fatal("a profile change replaced the Ed25519 key")
	}
	got, act, err := b.store.UpdateActor(b.ctx, "alice", ActorUpdate{RotateKey: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Ed25519Key) != ed25519.PrivateKeySize || got.Ed25519Key.Equal(a.Ed25519Key) {
		t.Fatal("the rotation kept the Ed25519 key")
	}
	stored, err := b.store.ActorByName(b.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Ed25519Key.Equal(got.Ed25519Key) {
		t.Fatal("the rotated Ed25519 key was not stored")
	}
	p, err := activitypub.ParseActivity(act.Document)
	if err != nil {
		t.Fatal(err)
	}
	person, err := activitypub.ParseActor(p.ObjectRaw)
	if err != nil {
		t.Fatal(err)
	}
	pub, _, err := activitypub.KeyOf(person, a.URI+"#ed25519-key")
	if err != nil || !got.Ed25519Key.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("the Update publishes %v, %v", pub, err)
	}
}

// TestOutgoingActivitiesCarryProofs: every activity a local actor writes
// carries an FEP-8b32 eddsa-jcs-2022 proof made with its Ed25519 key (the
// key its actor document publishes in assertionMethod), stored with the
// activity and carried in its event byte for byte, and the @context defines
// proof. The proof verifies against the published key; a changed copy does
// not.
func TestOutgoingActivitiesCarryProofs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	create, _, err := createNote(b.ctx, b.store, a, noteInput{Content: "signed words", To: []string{Public}})
	if err != nil {
		t.Fatal(err)
	}
	follow, err := b.store.Follow(b.ctx, a, "https://remote.example/users/bob")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := b.store.ActorJSON(a)
	if err != nil {
		t.Fatal(err)
	}
	person, err := activitypub.ParseActor(doc)
	if err != nil {
		t.Fatal(err)
	}
	pub, owner, err := activitypub.KeyOf(person, activitypub.Ed25519KeyID(a.URI))
	if err != nil || owner.ID != a.URI {
		t.Fatalf("the published Ed25519 key: %v", err)
	}
	for _, act := range []*Activity{create, follow} {
		out := b.checkOutgoing(t, act, act.Type)
		proofs, err := activitypub.Proofs(out.Activity)
		if err != nil || len(proofs) != 1 {
			t.Fatalf("%s: proofs %v, %v in %s", act.Type, proofs, err, out.Activity)
		}
		p := proofs[0]
		if p.VerificationMethod != a.URI+"#ed25519-key" || !p.EdDSAJCS() || p.ProofPurpose != "assertionMethod" ||
			p.Created != act.Published.UTC().Format(time.RFC3339) {
			t.Fatalf("%s: proof %+v", act.Type, p)
		}
		if err := activitypub.VerifyProof(out.Activity, p, pub.(ed25519.PublicKey)); err != nil {
			t.Fatalf("%s: the proof does not verify: %v", act.Type, err)
		}
		if !bytes.Contains(out.Activity, []byte(`"`+activitypub.DataIntegrityContext+`"`)) {
			t.Fatalf("%s: no data integrity context in %s", act.Type, out.Activity)
		}
		changed := bytes.Replace(out.Activity, []byte(`"to":["`), []byte(`"to":["https://remote.example/users/eve","`), 1)
		if err := activitypub.VerifyProof(changed, p, pub.(ed25519.PublicKey)); err == nil {
			t.Fatalf("%s: a changed copy verifies", act.Type)
		}
	}
}
