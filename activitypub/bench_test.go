package activitypub

import (
	"bytes"
	"crypto/rsa"
	"net/http"
	"testing"
	"time"
)

// benchBody is a typical delivered activity (a short public Note), the size
// the signing and verification rates are measured with.
var benchBody = []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"https://courier.example/activities/0b5a4b1e-7f0e-5c8e-9a53-6a0f6e2c4d11","type":"Create","actor":"https://courier.example/users/alice","object":{"id":"https://courier.example/objects/5f2d7c1a-3b9e-5d40-8c6e-1e4a7b0c9d22","type":"Note","attributedTo":"https://courier.example/users/alice","content":"<p>Hello, fediverse! This is a typical short post of a few words.</p>","to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["https://courier.example/users/alice/followers"],"published":"2026-01-02T03:04:05Z"},"to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["https://courier.example/users/alice/followers"],"published":"2026-01-02T03:04:05Z"}`)

const (
	benchInbox = "https://remote.example/users/bob/inbox"
	benchKeyID = "https://courier.example/users/alice#main-key"
)

// signBenchRequest signs a typical delivery POST with key at now.
func signBenchRequest(key *rsa.PrivateKey, now time.Time) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, benchInbox, bytes.NewReader(benchBody))
	if err != nil {
		return nil, err
	}
	if err := SignRequest(req, benchBody, benchKeyID, key, now); err != nil {
		return nil, err
	}
	return req, nil
}

// signedBenchRequest is a typical delivery POST signed with key at now, as
// a server receives it.
func signedBenchRequest(key *rsa.PrivateKey, now time.Time) (*http.Request, error) {
	req, err := signBenchRequest(key, now)
	if err != nil {
		return nil, err
	}
	req.RequestURI = req.URL.RequestURI()
	return req, nil
}

// measureSignRate signs typical delivery POSTs with key for about d and
// returns the rate in signatures per second, 0 on an error.
func measureSignRate(key *rsa.PrivateKey, d time.Duration) float64 {
	now := time.Now()
	start, n := time.Now(), 0
	for time.Since(start) < d {
		if _, err := signBenchRequest(key, now); err != nil {
			return 0
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

// measureVerifyRate verifies a typical signed delivery POST for about d and
// returns verifications per second (digest, date window and signature
// checked each time), 0 on an error.
func measureVerifyRate(key *rsa.PrivateKey, d time.Duration) float64 {
	now := time.Now()
	req, err := signedBenchRequest(key, now)
	if err != nil {
		return 0
	}
	opts := VerifyOptions{Now: func() time.Time { return now }}
	start, n := time.Now(), 0
	for time.Since(start) < d {
		if err := Verify(req, benchBody, &key.PublicKey, opts); err != nil {
			return 0
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

func BenchmarkSignRSA2048(b *testing.B) {
	key := testKey()
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := signBenchRequest(key, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
}

func BenchmarkVerifyRSA2048(b *testing.B) {
	key := testKey()
	now := time.Now()
	req, err := signedBenchRequest(key, now)
	if err != nil {
		b.Fatal(err)
	}
	opts := VerifyOptions{Now: func() time.Time { return now }}
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(req, benchBody, &key.PublicKey, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "verifies/s")
}

func BenchmarkParseActivity(b *testing.B) {
	data := readTestdata(b, "fediverse/mastodon/activities/create_note.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ParseActivity(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMeasureRates(t *testing.T) {
	t.Parallel()
	key := testKey()
	if r := measureSignRate(key, 20*time.Millisecond); r <= 0 {
		t.Fatalf("sign rate %v", r)
	}
	if r := measureVerifyRate(key, 20*time.Millisecond); r <= 0 {
		t.Fatalf("verify rate %v", r)
	}
}
