package activitypub

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"
)

// TestEd25519Multibase: a key published by Fedify's own test fixture
// (server.example/users/alice#ed25519-key) decodes to 32 bytes and encodes
// back to the same string; the RFC 9421 B.1.4 key survives a round trip;
// values that are not Ed25519 multikeys are refused with ErrBadKey.
func TestEd25519Multibase(t *testing.T) {
	t.Parallel()
	const fedify = "z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
	pub, err := ParseEd25519Multibase(fedify)
	if err != nil {
		t.Fatal(err)
	}
	if len(pub) != ed25519.PublicKeySize || EncodeEd25519Multibase(pub) != fedify {
		t.Fatalf("decoded %x, encodes to %s", pub, EncodeEd25519Multibase(pub))
	}
	block, _ := pem.Decode([]byte(rfcKeyEd25519Public))
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	rfc := k.(ed25519.PublicKey)
	back, err := ParseEd25519Multibase(EncodeEd25519Multibase(rfc))
	if err != nil || !back.Equal(rfc) {
		t.Fatalf("round trip: %x, %v", back, err)
	}
	for _, bad := range []string{
		"", "z", "u7QEm", fedify[:len(fedify)-1], fedify + "1", "z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ0",
		"z" + encodeBase58(append([]byte{0xe7, 0x01}, rfc...)), // a secp256k1 prefix
	} {
		if _, err := ParseEd25519Multibase(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("%q: got %v, want ErrBadKey", bad, err)
		}
	}
	m := NewEd25519Multikey("https://a.example/users/x#ed25519-key", "https://a.example/users/x", rfc)
	if m.Type != "Multikey" || m.PublicKeyMultibase != EncodeEd25519Multibase(rfc) {
		t.Fatalf("%+v", m)
	}
}

// TestParseActorMultikeys: an actor's assertionMethod Multikeys (one object
// or a list) become keys KeyOf resolves, owned by their controller; entries
// of another type are skipped, a broken value is refused as a bad key, and
// a Multikey controlled by another actor is refused by KeyOf.
func TestParseActorMultikeys(t *testing.T) {
	t.Parallel()
	const fedify = "z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2"
	want, err := ParseEd25519Multibase(fedify)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"id":"https://a.example/u","type":"Person","inbox":"https://a.example/u/inbox","assertionMethod":[
		{"id":"https://a.example/u#ed","type":"Multikey","controller":"https://a.example/u","publicKeyMultibase":"` + fedify + `"},
		{"id":"https://a.example/u#other","type":"Multikey","controller":"https://b.example/v","publicKeyMultibase":"` + fedify + `"},
		{"id":"https://a.example/u#x","type":"JsonWebKey","controller":"https://a.example/u","publicKeyMultibase":"` + fedify + `"},
		{"id":"https://a.example/u#bad","type":"Multikey","controller":"https://a.example/u","publicKeyMultibase":"zzz"},
		"https://a.example/u#ref"]}`
	a, err := ParseActor([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	pub, owner, err := KeyOf(a, "https://a.example/u#ed")
	if err != nil || owner.ID != a.ID {
		t.Fatalf("KeyOf #ed: %v", err)
	}
	if k, ok := pub.(ed25519.PublicKey); !ok || !k.Equal(want) {
		t.Fatalf("key %T %v", pub, pub)
	}
	for _, id := range []string{"https://a.example/u#other", "https://a.example/u#x", "https://a.example/u#bad", "https://a.example/u#ref"} {
		if _, _, err := KeyOf(a, id); !errors.Is(err, ErrKeyNotFound) && !errors.Is(err, ErrBadKey) {
			t.Errorf("KeyOf %s: got %v, want ErrKeyNotFound or ErrBadKey", id, err)
		}
	}
	one := `{"id":"https://a.example/u","type":"Person","inbox":"https://a.example/u/inbox","assertionMethod":
		{"id":"https://a.example/u#ed","type":"Multikey","controller":"https://a.example/u","publicKeyMultibase":"` + fedify + `"}}`
	if a, err = ParseActor([]byte(one)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := KeyOf(a, "https://a.example/u#ed"); err != nil {
		t.Fatalf("a single Multikey: %v", err)
	}
}
