package activitypub

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

// w3cVector reads the eddsa-jcs-2022 test vector of the W3C specification
// (testdata/vc-di-eddsa): the signed credential and the key pair.
func w3cVector(t *testing.T) (signed []byte, key ed25519.PrivateKey) {
	t.Helper()
	signed, err := os.ReadFile("testdata/vc-di-eddsa/signedJCS.json")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile("testdata/vc-di-eddsa/keyPair.json")
	if err != nil {
		t.Fatal(err)
	}
	var kp struct{ PublicKeyMultibase, PrivateKeyMultibase string }
	if err := json.Unmarshal(kb, &kp); err != nil {
		t.Fatal(err)
	}
	raw, err := decodeBase58(kp.PrivateKeyMultibase[1:])
	if err != nil || len(raw) != 2+ed25519.SeedSize || raw[0] != 0x80 || raw[1] != 0x26 {
		t.Fatalf("private key multibase: %x %v", raw, err)
	}
	key = ed25519.NewKeyFromSeed(raw[2:])
	pub, err := ParseEd25519Multibase(kp.PublicKeyMultibase)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(key.Public()) {
		t.Fatal("the vector's public key is not its private key's")
	}
	return signed, key
}

func TestProofW3CVector(t *testing.T) {
	signed, key := w3cVector(t)
	pub := key.Public().(ed25519.PublicKey)

	// Verify the vector as published.
	proofs, err := Proofs(signed)
	if err != nil || len(proofs) != 1 {
		t.Fatalf("Proofs = %v, %v", proofs, err)
	}
	p := proofs[0]
	if !p.EdDSAJCS() {
		t.Fatalf("proof %+v is not eddsa-jcs-2022", p)
	}
	if err := VerifyProof(signed, p, pub); err != nil {
		t.Fatalf("VerifyProof(W3C vector) = %v", err)
	}

	// The document without its proof canonicalizes to the vector's JCS text.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(signed, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "proof")
	unsigned, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := jcs.Transform(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/vc-di-eddsa/canonDocJCS.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(canon, bytes.TrimSpace(want)) {
		t.Fatalf("JCS of the document:\n%s\nwant\n%s", canon, want)
	}

	// Signing the unsigned document with the vector's options gives its
	// proofValue (Ed25519 is deterministic).
	created, err := time.Parse(time.RFC3339, p.Created)
	if err != nil {
		t.Fatal(err)
	}
	out, err := AddProof(unsigned, p.VerificationMethod, key, created)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := Proofs(out)
	if err != nil || len(mine) != 1 {
		t.Fatalf("Proofs(signed) = %v, %v", mine, err)
	}
	if mine[0].ProofValue != p.ProofValue {
		t.Fatalf("proofValue %s, want the vector's %s", mine[0].ProofValue, p.ProofValue)
	}
	if err := VerifyProof(out, mine[0], pub); err != nil {
		t.Fatalf("VerifyProof(signed again) = %v", err)
	}

	// A changed document, a changed proof option or another key fail.
	tampered := bytes.Replace(signed, []byte("The School of Examples"), []byte("The School of Forgeries"), 1)
	if err := VerifyProof(tampered, p, pub); !errors.Is(err, ErrProof) {
		t.Fatalf("VerifyProof(tampered document) = %v, want ErrProof", err)
	}
	later := bytes.Replace(signed, []byte("2023-02-24T23:36:38Z"), []byte("2023-02-24T23:36:39Z"), 1)
	lp, _ := Proofs(later)
	if err := VerifyProof(later, lp[0], pub); !errors.Is(err, ErrProof) {
		t.Fatalf("VerifyProof(changed created) = %v, want ErrProof", err)
	}
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	if err := VerifyProof(signed, p, other.Public().(ed25519.PublicKey)); !errors.Is(err, ErrProof) {
		t.Fatalf("VerifyProof(another key) = %v, want ErrProof", err)
	}
}

func TestAddProofActivity(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	at := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	actor := "https://courier.example/users/alice"
	note := map[string]any{"id": "https://courier.example/objects/1", "type": "Note", "attributedTo": actor,
		"content": "<p>hello & goodbye</p>", "to": []string{Public}}
	build := func() []byte {
		doc, _, err := NewActivityContext(WithDataIntegrity(nil), "https://courier.example", "ev-1", "Create", actor,
			note, "", []string{Public}, nil, at)
		if err != nil {
			t.Fatal(err)
		}
		out, err := AddProof(doc, Ed25519KeyID(actor), key, at)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, b := build(), build()
	if !bytes.Equal(a, b) {
		t.Fatalf("two builds differ:\n%s\n%s", a, b)
	}
	if !bytes.Contains(a, []byte(`"@context":["https://www.w3.org/ns/activitystreams","`+DataIntegrityContext+`"]`)) {
		t.Fatalf("the data integrity context is missing: %s", a)
	}
	act, err := ParseActivity(a)
	if err != nil || act.Object == nil || act.Object.Content != "<p>hello & goodbye</p>" {
		t.Fatalf("ParseActivity = %+v, %v", act, err)
	}
	proofs, err := Proofs(a)
	if err != nil || len(proofs) != 1 {
		t.Fatalf("Proofs = %v, %v", proofs, err)
	}
	p := proofs[0]
	if p.VerificationMethod != Ed25519KeyID(actor) || p.ProofPurpose != ProofPurposeAssertion ||
		p.Created != "2026-12-06T13:00:00Z" || !p.EdDSAJCS() {
		t.Fatalf("proof %+v", p)
	}
	if err := VerifyProof(a, p, pub); err != nil {
		t.Fatalf("VerifyProof = %v", err)
	}
	// An LD signature added after the proof does not break it (FEP-8b32).
	withSig := append(bytes.TrimSuffix(a, []byte("}")), []byte(`,"signature":{"type":"RsaSignature2017","signatureValue":"x"}}`)...)
	if err := VerifyProof(withSig, p, pub); err != nil {
		t.Fatalf("VerifyProof(with an LD signature) = %v", err)
	}
	tampered := bytes.Replace(a, []byte("hello"), []byte("HELLO"), 1)
	err = VerifyProof(tampered, p, pub)
	if !errors.Is(err, ErrProof) || !strings.Contains(err.Error(), "changed after signing") {
		t.Fatalf("VerifyProof(tampered) = %v", err)
	}
	if _, err := AddProof(a, Ed25519KeyID(actor), key, at); !errors.Is(err, ErrBuild) {
		t.Fatalf("AddProof(a signed document) = %v, want ErrBuild", err)
	}
}

func TestWithDataIntegrity(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{nil, `["https://www.w3.org/ns/activitystreams","` + DataIntegrityContext + `"]`},
		{ActivityStreams, `["https://www.w3.org/ns/activitystreams","` + DataIntegrityContext + `"]`},
		{[]any{ActivityStreams, map[string]any{"toot": "http://joinmastodon.org/ns#"}},
			`["https://www.w3.org/ns/activitystreams","` + DataIntegrityContext + `",{"toot":"http://joinmastodon.org/ns#"}]`},
		{[]any{ActivityStreams, DataIntegrityContext}, `["https://www.w3.org/ns/activitystreams","` + DataIntegrityContext + `"]`},
	} {
		b, err := json.Marshal(WithDataIntegrity(tc.in))
		if err != nil || string(b) != tc.want {
			t.Errorf("WithDataIntegrity(%v) = %s, %v; want %s", tc.in, b, err, tc.want)
		}
	}
}

// BenchmarkProof measures making and verifying the proof of a Create of a
// short note, as courier builds it:
//
//	go test ./activitypub/ -run '^$' -bench BenchmarkProof
func BenchmarkProof(b *testing.B) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	pub := key.Public().(ed25519.PublicKey)
	at := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	actor := "https://courier.example/users/alice"
	note := map[string]any{"id": "https://courier.example/objects/1", "type": "Note", "attributedTo": actor,
		"content": "<p>" + strings.Repeat("a few words ", 20) + "</p>", "to": []string{Public},
		"cc": []string{actor + "/followers"}, "published": at.Format(time.RFC3339)}
	doc, _, err := NewActivityContext(WithDataIntegrity(nil), "https://courier.example", "ev-1", "Create", actor,
		note, "", []string{Public}, []string{actor + "/followers"}, at)
	if err != nil {
		b.Fatal(err)
	}
	signed, err := AddProof(doc, Ed25519KeyID(actor), key, at)
	if err != nil {
		b.Fatal(err)
	}
	act, err := ParseActivity(signed)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := AddProof(doc, Ed25519KeyID(actor), key, at); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			proofs, err := ParseProofs(act.Proof)
			if err != nil {
				b.Fatal(err)
			}
			if err := VerifyProof(signed, proofs[0], pub); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ed25519-verify", func(b *testing.B) {
		sig := ed25519.Sign(key, doc)
		for b.Loop() {
			if !ed25519.Verify(pub, doc, sig) {
				b.Fatal("no")
			}
		}
	})
}

// FuzzProof: reading and verifying the proofs of any document never
// panics, a proof never verifies over a document it was not made for, and
// the W3C vector's proof verifies only over its own document.
func FuzzProof(f *testing.F) {
	signed, err := os.ReadFile("testdata/vc-di-eddsa/signedJCS.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(signed)
	f.Add([]byte(`{"proof":[{"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","proofValue":"z1"},null,1]}`))
	f.Add([]byte(`{"@context":{"a":1e400},"proof":{"@context":[{"b":-0.0}],"type":"DataIntegrityProof","cryptosuite":"eddsa-jcs-2022","proofPurpose":"assertionMethod","proofValue":"z5"}}`))
	var kp struct{ PublicKeyMultibase string }
	kb, err := os.ReadFile("testdata/vc-di-eddsa/keyPair.json")
	if err != nil {
		f.Fatal(err)
	}
	if err := json.Unmarshal(kb, &kp); err != nil {
		f.Fatal(err)
	}
	pub, err := ParseEd25519Multibase(kp.PublicKeyMultibase)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		proofs, err := Proofs(data)
		if err != nil {
			return
		}
		for _, p := range proofs {
			if VerifyProof(data, p, pub) == nil && !bytes.Equal(data, signed) {
				// Only JSON that canonicalizes like the vector may verify.
				a, err1 := jcs.Transform(stripProofs(t, data))
				b, err2 := jcs.Transform(stripProofs(t, signed))
				if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
					t.Fatalf("a proof verified over another document: %s", data)
				}
			}
		}
	})
}

func stripProofs(t *testing.T, doc []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "proof")
	delete(m, "signature")
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
