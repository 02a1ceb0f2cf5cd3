package activitypub

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFollowersDigestMastodonVector: the digest of Mastodon's own test
// (spec/models/concerns/account/interactions_spec.rb, remote_followers_hash):
// the followers on example.org, and on foo.org, of an account with
// followers on both; a look-alike host and a bare host have none.
func TestFollowersDigestMastodonVector(t *testing.T) {
	t.Parallel()
	followers := []string{"https://example.org/users/alice", "https://example.org/users/bob",
		"https://example.org", "https://foo.org/users/eve"}
	on := func(prefix string) []string {
		var out []string
		for _, f := range followers {
			if OnPrefix(f, prefix) {
				out = append(out, f)
			}
		}
		return out
	}
	for _, tc := range []struct{ url, want string }{
		{"https://example.org/", "20aecbe774b3d61c25094370baf370012b9271c5b172ecedb05caff8d79ef0c7"},
		{"https://foo.org/", "ccb9c18a67134cfff9d62c7f7e7eb88e6b803446c244b84265565f4eba29df0e"},
		{"https://foo.org.evil.com/", strings.Repeat("0", 64)},
	} {
		if got := FollowersDigest(on(URLPrefix(tc.url))); got != tc.want {
			t.Errorf("%s: digest %s, want %s", tc.url, got, tc.want)
		}
	}
	// Order does not matter.
	a := FollowersDigest([]string{"https://example.org", "https://example.org/users/bob", "https://example.org/users/alice"})
	if a != "20aecbe774b3d61c25094370baf370012b9271c5b172ecedb05caff8d79ef0c7" {
		t.Errorf("reordered: %s", a)
	}
}

// TestParseCollectionSync reads Mastodon's header and refuses malformed
// ones.
func TestParseCollectionSync(t *testing.T) {
	t.Parallel()
	want := CollectionSync{CollectionID: "https://m.example/users/a/followers",
		URL: "https://m.example/users/a/followers_synchronization", Digest: strings.Repeat("ab", 32)}
	got, err := ParseCollectionSync(want.String())
	if err != nil || got != want {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	got, err = ParseCollectionSync(`collectionId="https://m.example/users/a/followers",url="https://m.example/users/a/followers_synchronization",digest="` + strings.Repeat("AB", 32) + `", extra="x"`)
	if err != nil || got != want {
		t.Fatalf("no spaces, upper-case digest, unknown key: %+v, %v", got, err)
	}
	for _, bad := range []string{
		``, `collectionId="https://m.example/f"`,
		`collectionId="https://m.example/f", url="ftp://m.example/p", digest="` + strings.Repeat("0", 64) + `"`,
		`collectionId="https://m.example/f", url="https://m.example/p", digest="00"`,
		`collectionId="https://m.example/f" url="https://m.example/p"`,
		`collectionId="https://m.example/f, url=`,
	} {
		if _, err := ParseCollectionSync(bad); !errors.Is(err, ErrCollectionSync) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestCollectionSyncSigned: a POST carrying the header has it signed, by
// draft-cavage and by RFC 9421, and both verify; one without it signs as
// before.
func TestCollectionSyncSigned(t *testing.T) {
	t.Parallel()
	key := testKey()
	now := time.Now()
	body := []byte(`{"type":"Create"}`)
	h := CollectionSync{CollectionID: "https://c.example/users/a/followers",
		URL: "https://c.example/users/a/followers_synchronization", Digest: strings.Repeat("0", 64)}.String()
	for _, rfc := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, "https://r.example/inbox", bytes.NewReader(body))
		req.Header.Set(CollectionSyncHeader, h)
		var err error
		if rfc {
			err = SignMessage(req, body, "https://c.example/users/a#main-key", key, now)
		} else {
			err = SignRequest(req, body, "https://c.example/users/a#main-key", key, now)
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := RequestSignature(req)
		if err != nil || !p.Signs("collection-synchronization") {
			t.Fatalf("rfc9421 %v: header not signed: %+v %v", rfc, p, err)
		}
		if err := Verify(req, body, &key.PublicKey, VerifyOptions{Now: func() time.Time { return now }}); err != nil {
			t.Fatalf("rfc9421 %v: %v", rfc, err)
		}
		req.Header.Set(CollectionSyncHeader, strings.Replace(h, "000", "111", 1))
		if err := Verify(req, body, &key.PublicKey, VerifyOptions{Now: func() time.Time { return now }}); err == nil {
			t.Fatalf("rfc9421 %v: a changed header verifies", rfc)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "https://r.example/inbox", bytes.NewReader(body))
	if err := SignRequest(req, body, "https://c.example/users/a#main-key", key, now); err != nil {
		t.Fatal(err)
	}
	if p, _ := RequestSignature(req); p.Signs("collection-synchronization") {
		t.Fatal("signed a header that is not there")
	}
}

// FuzzParseCollectionSync: any header value parses or fails with
// ErrCollectionSync, and what parses formats back to a value that parses to
// the same.
func FuzzParseCollectionSync(f *testing.F) {
	f.Add(`collectionId="https://m.example/users/a/followers", url="https://m.example/users/a/followers_synchronization", digest="` + strings.Repeat("0", 64) + `"`)
	f.Add(`collectionId="https://m.example/f",url="http://m.example/p",digest="` + strings.Repeat("F", 64) + `",x="y"`)
	f.Add(`collectionId="`)
	f.Fuzz(func(t *testing.T, h string) {
		s, err := ParseCollectionSync(h)
		if err != nil {
			if !errors.Is(err, ErrCollectionSync) {
				t.Fatalf("%q: %v", h, err)
			}
			return
		}
		again, err := ParseCollectionSync(s.String())
		if err != nil || again != s {
			t.Fatalf("%q: %+v, again %+v %v", h, s, again, err)
		}
	})
}
