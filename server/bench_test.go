package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// BenchmarkC2SCreateNote measures POST /users/{name}/outbox over loopback
// HTTP on a production-configured store (SQLite synchronous=FULL, or PostgreSQL), and reports
// it against the rate of the same write called directly on the store,
// measured in the same run: the ratio is what the HTTP layer (auth, parse,
// routing) costs.
func BenchmarkC2SCreateNote(b *testing.B) {
	ctx := context.Background()
	db := storetest.New(b)
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	defer srv.Close()
	st := store.New(db, srv.URL, nil)
	s, err := New(Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	handler = s.Handler()
	a, token, err := st.CreateActor(ctx, store.NewActor{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	in := notetest.Input{Content: "<p>a benchmark note</p>", To: []string{store.Public}}
	const direct = 200
	start := time.Now()
	for range direct {
		if _, _, err := notetest.Create(ctx, st, a, in); err != nil {
			b.Fatal(err)
		}
	}
	directRate := direct / time.Since(start).Seconds()

	body := []byte(`{"type":"Note","content":"<p>a benchmark note</p>","to":"as:Public"}`)
	client := srv.Client()
	b.ResetTimer()
	start = time.Now()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/users/bench/outbox", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/activity+json")
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "posts/s")
	b.ReportMetric(directRate, "direct_writes/s")
	b.ReportMetric(rate/directRate, "ratio_to_direct")
}
