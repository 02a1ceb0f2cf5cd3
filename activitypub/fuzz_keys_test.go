package activitypub

import (
	"crypto/ed25519"
	"crypto/rsa"
	"testing"
)

// FuzzParseKeyHolder feeds what a key id URL may serve to the parser
// FetchKey uses: whatever it accepts has an id, and each key it yields has
// key material, is found by its id, and parses or is refused cleanly.
func FuzzParseKeyHolder(f *testing.F) {
	addFixtures(f, "gotosocial-0.19.2/objects/*.json", "constructed/*.json", "fediverse/*/objects/person*.json")
	f.Add([]byte(`{"id":"https://a.example/k","type":"Multikey","controller":"https://a.example/u","publicKeyMultibase":"z6MkmM42vxfqZQsv4ehtTjFFxQ4sQKS2w6WR7emozFAn5cxu"}`))
	f.Add([]byte(`{"id":"https://a.example/u","assertionMethod":[{"id":"https://a.example/u#k","publicKeyMultibase":"z1"},"https://a.example/x"]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := parseKeyHolder(data)
		if err != nil {
			return
		}
		if h.id == "" || len(h.keys) == 0 {
			t.Fatalf("accepted without id or keys: %+v", h)
		}
		for _, k := range h.keys {
			if k.PublicKeyPem == "" && k.PublicKeyMultibase == "" {
				t.Fatalf("a key without material: %+v", k)
			}
			if k.ID != "" {
				if _, ok := h.key(k.ID); !ok {
					t.Fatalf("key %q not found by its id", k.ID)
				}
			}
			_, _ = k.Parse()
		}
	})
}

// FuzzParseMultikey: whatever ParseMultikey accepts re-encodes to a value
// that parses to the same key.
func FuzzParseMultikey(f *testing.F) {
	f.Add("z6MkmM42vxfqZQsv4ehtTjFFxQ4sQKS2w6WR7emozFAn5cxu")
	f.Add("z")
	f.Add("z111")
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParseMultikey(s)
		if err != nil {
			return
		}
		enc, err := EncodeMultikey(pub)
		if err != nil {
			t.Fatalf("cannot re-encode %T: %v", pub, err)
		}
		back, err := ParseMultikey(enc)
		if err != nil {
			t.Fatalf("re-encoded %q: %v", enc, err)
		}
		switch k := pub.(type) {
		case ed25519.PublicKey:
			if !k.Equal(back) {
				t.Fatal("Ed25519 key changed")
			}
		case *rsa.PublicKey:
			if !k.Equal(back) {
				t.Fatal("RSA key changed")
			}
		default:
			t.Fatalf("unexpected key type %T", pub)
		}
	})
}
