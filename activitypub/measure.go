package activitypub

import (
	"bytes"
	"crypto/rsa"
	"net/http"
	"time"
)

// benchBody is a typical delivered activity (a short public Note), the size
// the signing and verification rates are measured with.
var benchBody = []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"https://courier.example/activities/0b5a4b1e-7f0e-5c8e-9a53-6a0f6e2c4d11","type":"Create","actor":"https://courier.example/users/alice","object":{"id":"https://courier.example/objects/5f2d7c1a-3b9e-5d40-8c6e-1e4a7b0c9d22","type":"Note","attributedTo":"https://courier.example/users/alice","content":"<p>Hello, fediverse! This is a typical short post of a few words.</p>","to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["https://courier.example/users/alice/followers"],"published":"2026-01-02T03:04:05Z"},"to":["https://www.w3.org/ns/activitystreams#Public"],"cc":["https://courier.example/users/alice/followers"],"published":"2026-01-02T03:04:05Z"}`)

const (
	benchInbox = "https://remote.example/users/bob/inbox"
	benchKeyID = "https://courier.example/users/alice#main-key"
)

// MeasureSignRate signs typical delivery POSTs with key for about d and
// returns the rate in signatures per second: the machine's own ceiling for
// signed deliveries, for benchmarks elsewhere to compare against in the
// same run. A nil key makes a fresh RSA-2048 key (not counted in d).
func MeasureSignRate(key *rsa.PrivateKey, d time.Duration) float64 {
	if key == nil {
		var err error
		if key, err = GenerateKey(); err != nil {
			return 0
		}
	}
	now := time.Now()
	start, n := time.Now(), 0
	for time.Since(start) < d {
		req, err := http.NewRequest(http.MethodPost, benchInbox, bytes.NewReader(benchBody))
		if err != nil {
			return 0
		}
		if err := SignRequest(req, benchBody, benchKeyID, key, now); err != nil {
			return 0
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

// MeasureVerifyRate verifies a typical signed delivery POST for about d and
// returns verifications per second (digest, date window and RSA-2048
// signature checked each time). A nil key makes a fresh RSA-2048 key.
func MeasureVerifyRate(key *rsa.PrivateKey, d time.Duration) float64 {
	if key == nil {
		var err error
		if key, err = GenerateKey(); err != nil {
			return 0
		}
	}
	now := time.Now()
	req, err := http.NewRequest(http.MethodPost, benchInbox, bytes.NewReader(benchBody))
	if err != nil {
		return 0
	}
	if err := SignRequest(req, benchBody, benchKeyID, key, now); err != nil {
		return 0
	}
	req.RequestURI = req.URL.RequestURI()
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
