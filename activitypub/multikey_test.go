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
		"z" + base58Encode(append([]byte{0xe7, 0x01}, rfc...)), // a secp256k1 prefix
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
