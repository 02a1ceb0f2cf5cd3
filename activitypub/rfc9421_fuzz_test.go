package activitypub

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// FuzzMessageSignature feeds arbitrary Signature-Input, Signature and
// Content-Digest values through RequestSignature and VerifySignature: they
// must not panic, a parsed signature's components re-serialize to a value
// that parses to the same serialization, and nothing verifies against a
// key that did not sign.
func FuzzMessageSignature(f *testing.F) {
	for _, v := range rfcVectors {
		f.Add(v.label+"="+v.input, v.label+"=:"+v.sig+":", rfcContentDigest)
	}
	f.Add(`sig1=("@method" "@target-uri" "content-digest";sf);created=1618884473;keyid="k";alg="ed25519"`, `sig1=:AAAA:`, `sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:`)
	f.Add(`a=(), b=("@query-param";name="Pet");keyid="x";created=1, c`, `b=:AA==:, a=?1`, `sha-512=:x:, sha-256=(1)`)
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		f.Fatal(err)
	}
	opts := VerifyOptions{Now: func() time.Time { return time.Unix(rfcCreated, 0) }}
	f.Fuzz(func(t *testing.T, input, sig, digest string) {
		r := rfcRequest()
		r.Header.Set("Signature-Input", input)
		r.Header.Set("Signature", sig)
		r.Header.Set("Content-Digest", digest)
		p, err := RequestSignature(r)
		if err != nil {
			return
		}
		if p.IsMessageSignature() {
			var b strings.Builder
			serializeSFInnerList(&b, p.msg.components, p.msg.params)
			members, err := parseSFDictionary("x=" + b.String())
			if err != nil || len(members) != 1 || !members[0].list {
				t.Fatalf("%q re-serialized as %q: %v", input, b.String(), err)
			}
			var again strings.Builder
			serializeSFInnerList(&again, members[0].inner, members[0].params)
			if again.String() != b.String() {
				t.Fatalf("serialization %q, then %q", b.String(), again.String())
			}
		}
		if err := VerifySignature(r, p, []byte(rfcBody), pub, opts); err == nil {
			t.Fatalf("a random key verified %q / %q", input, sig)
		}
	})
}

// FuzzEd25519Multibase: ParseEd25519Multibase never panics, and what it
// accepts encodes back to the same string.
func FuzzEd25519Multibase(f *testing.F) {
	f.Add("z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2")
	f.Add("z111111111111111111111111111111111111111111111")
	f.Add("u7QEm")
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParseEd25519Multibase(s)
		if err != nil {
			return
		}
		if got := EncodeEd25519Multibase(pub); got != s {
			t.Fatalf("%q parsed and encoded as %q", s, got)
		}
	})
}
