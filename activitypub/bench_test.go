package activitypub

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

func BenchmarkSignRSA2048(b *testing.B) {
	key := testKey()
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, benchInbox, bytes.NewReader(benchBody))
		if err != nil {
			b.Fatal(err)
		}
		if err := SignRequest(req, benchBody, benchKeyID, key, now); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
}

func BenchmarkVerifyRSA2048(b *testing.B) {
	key := testKey()
	now := time.Now()
	req, err := http.NewRequest(http.MethodPost, benchInbox, bytes.NewReader(benchBody))
	if err != nil {
		b.Fatal(err)
	}
	if err := SignRequest(req, benchBody, benchKeyID, key, now); err != nil {
		b.Fatal(err)
	}
	req.RequestURI = req.URL.RequestURI()
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
	if r := MeasureSignRate(key, 20*time.Millisecond); r <= 0 {
		t.Fatalf("sign rate %v", r)
	}
	if r := MeasureVerifyRate(key, 20*time.Millisecond); r <= 0 {
		t.Fatalf("verify rate %v", r)
	}
}
