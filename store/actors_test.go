package store

import (
	"crypto/rsa"
	"errors"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

func TestCreateActorGeneratesKeyAndHashesToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.newKey = activitypub.GenerateKey // the real generator, once
	a, token, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice", DisplayName: "Alice", Summary: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if a.URI != testBase+"/users/alice" {
		t.Fatalf("uri %s", a.URI)
	}
	priv, err := activitypub.ParsePrivateKeyPEM(a.PrivateKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if priv.N.BitLen() != 2048 {
		t.Fatalf("key has %d bits", priv.N.BitLen())
	}
	pub, err := activitypub.ParsePublicKeyPEM(a.PublicKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.PublicKey.Equal(pub.(*rsa.PublicKey)) {
		t.Fatal("public key does not match private key")
	}
	if len(token) < 40 {
		t.Fatalf("token %q is short", token)
	}
	var stored string
	if err := b.db.Write.QueryRowContext(b.ctx, `SELECT token_hash FROM actors WHERE name = 'alice'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored == token || strings.Contains(stored, token) || stored != hashToken(token) {
		t.Fatalf("stored %q: want the SHA-256 of the token, never the token", stored)
	}
	got, err := b.store.ActorByName(b.ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.DisplayName != "Alice" || got.Summary != "hi" || got.PublicKeyPEM != a.PublicKeyPEM || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("read back %+v", got)
	}
}

func TestCreateActorRejectsBadAndTakenNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.actor(t, "taken")
	for _, tc := range []struct {
		name string
		code Code
	}{
		{"", EINVALID},
		{"Alice", EINVALID},
		{"al-ice", EINVALID},
		{"al ice", EINVALID},
		{"ålice", EINVALID},
		{strings.Repeat("a", 31), EINVALID},
		{"../etc", EINVALID},
		{"taken", ECONFLICT},
	} {
		_, _, err := b.store.CreateActor(b.ctx, NewActor{Name: tc.name})
		if ErrorCode(err) != tc.code {
			t.Errorf("CreateActor(%q) = %v, want code %s", tc.name, err, tc.code)
		}
	}
	for _, ok := range []string{"a", "z_9", strings.Repeat("x", 30)} {
		if _, _, err := b.store.CreateActor(b.ctx, NewActor{Name: ok}); err != nil {
			t.Errorf("CreateActor(%q): %v", ok, err)
		}
	}
	if _, _, err := b.store.CreateActor(b.ctx, NewActor{Name: "long", DisplayName: strings.Repeat("n", MaxDisplayNameLen+1)}); ErrorCode(err) != EINVALID {
		t.Errorf("long display name: %v", err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM actors`); n != 4 {
		t.Fatalf("%d actors, want 4", n)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, token, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, bobToken, err := b.store.CreateActor(b.ctx, NewActor{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.store.Authenticate(b.ctx, "alice", token)
	if err != nil || a.Name != "alice" {
		t.Fatalf("Authenticate = %v, %v", a, err)
	}
	for _, tc := range []struct{ name, token string }{
		{"alice", ""},
		{"alice", token + "x"},
		{"alice", bobToken},
		{"carol", token},
		{"BAD NAME", token},
	} {
		if _, err := b.store.Authenticate(b.ctx, tc.name, tc.token); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("Authenticate(%q, %q) = %v, want unauthorized", tc.name, tc.token, err)
		}
	}
}

func TestActorDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, _, err := b.store.CreateActor(b.ctx, NewActor{Name: "alice", DisplayName: "Alice A.", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.store.ActorJSON(a)
	if err != nil {
		t.Fatal(err)
	}
	// The project's own tolerant parser reads what peers read.
	p, err := activitypub.ParseActor(raw)
	if err != nil {
		t.Fatal(err)
	}
	u := b.store.URIs()
	if p.ID != a.URI || p.Type != "Person" || p.PreferredUsername != "alice" || p.Name != "Alice A." ||
		p.Inbox != u.Inbox("alice") || p.Outbox != u.Outbox("alice") || p.Followers != u.Followers("alice") ||
		p.Following != u.Following("alice") || p.SharedInbox != testBase+"/inbox" || !p.ManuallyApprovesFollowers {
		t.Fatalf("parsed %+v", p)
	}
	if p.PublicKey.ID != a.URI+"#main-key" || p.PublicKey.Owner != a.URI || p.PublicKey.PublicKeyPem != a.PublicKeyPEM {
		t.Fatalf("publicKey %+v", p.PublicKey)
	}
	if _, ok := p.Key(u.KeyID("alice")); !ok {
		t.Fatal("key id not found by KeyID")
	}
}

func TestActorByURI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.actor(t, "alice")
	for _, uri := range []string{a.URI, a.URI + "#main-key"} {
		got, err := b.store.ActorByURI(b.ctx, uri)
		if err != nil || got.ID != a.ID {
			t.Errorf("ActorByURI(%q) = %v, %v", uri, got, err)
		}
	}
	for _, uri := range []string{"https://elsewhere.test/users/alice", testBase + "/users/alice/outbox", testBase + "/users/nobody"} {
		if _, err := b.store.ActorByURI(b.ctx, uri); !errors.Is(err, ErrNotFound) {
			t.Errorf("ActorByURI(%q) = %v, want not found", uri, err)
		}
	}
}
