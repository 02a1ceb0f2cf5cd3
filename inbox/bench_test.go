package inbox_test

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/metrics"
)

// BenchmarkAccept measures signed inbound activities accepted per second
// over loopback HTTP with a warm key cache (every request verified, recorded
// and its event enqueued on a FULL-synchronous SQLite file), and, in the
// same run, the machine's RSA-2048 verifications per second on as many
// goroutines as GOMAXPROCS. Each request costs at least one verification,
// so their ratio is the share of the machine's signature-checking capacity
// the inbox delivers. Requests are signed before the timer starts (signing
// costs far more than verifying). Run it with a fixed count, e.g.
//
//	go test ./inbox/ -run '^$' -bench BenchmarkAccept -benchtime 3000x
func BenchmarkAccept(b *testing.B) {
	tb := setup(b, options{sync: "FULL", noWorker: true})
	const senders = 8
	for i := range senders {
		tb.remote.add(fmt.Sprintf("s%d", i), key(b, keyRemote))
	}
	sign := func(n int) []*http.Request {
		reqs := make([]*http.Request, n)
		var wg sync.WaitGroup
		for w := range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for i := w; i < n; i += runtime.GOMAXPROCS(0) {
					name := fmt.Sprintf("s%d", i%senders)
					actor := tb.remote.actor(name)
					id := tb.id("create")
					body := mustJSON(b, activity(id, "Create", actor, note(id+"/note", actor, nil)))
					reqs[i] = tb.request(b, "/inbox", body, tb.as(b, name))
				}
			})
		}
		wg.Wait()
		return reqs
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 128}}
	post := func(reqs []*http.Request, conc int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(reqs) {
						return
					}
					resp, err := client.Do(reqs[i])
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// Warm the key cache (one fetch per sender) and the connections.
	post(sign(2*senders), senders)

	reqs := sign(b.N)
	b.ResetTimer()
	start := time.Now()
	post(reqs, 128)
	elapsed := time.Since(start)
	b.StopTimer()
	if got := tb.result(b, metrics.InboxAccepted); got != b.N+2*senders {
		b.Fatalf("%d accepted, want %d", got, b.N+2*senders)
	}
	accepted := float64(b.N) / elapsed.Seconds()
	verifies := rsaVerifyRate(b, key(b, keyRemote))
	b.ReportMetric(accepted, "accepted/s")
	b.ReportMetric(verifies, "rsa_verify/s")
	b.ReportMetric(accepted/verifies, "ratio")
}

// rsaVerifyRate measures RSA-2048 PKCS#1 v1.5 SHA-256 verifications per
// second on GOMAXPROCS goroutines for about half a second.
func rsaVerifyRate(b *testing.B, k *rsa.PrivateKey) float64 {
	b.Helper()
	sum := sha256.Sum256([]byte("(request-target): post /inbox"))
	sig, err := rsa.SignPKCS1v15(nil, k, crypto.SHA256, sum[:])
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	deadline := time.Now().Add(500 * time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				for range 16 {
					if err := rsa.VerifyPKCS1v15(&k.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
						b.Error(err)
						return
					}
				}
				n.Add(16)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}
