//go:build unix

package delivery_test

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// edBenchPerHost is how many followers with personal inboxes alice has on
// each of BenchmarkFanout's benchHosts hosts in BenchmarkFanoutEd25519:
// one post, 10,000 deliveries.
const edBenchPerHost = 10

// BenchmarkFanoutEd25519 fans one post out to 10,000 followers on 1,000
// hosts over TLS, twice on fresh databases: once to hosts courier knows to
// accept RFC 9421 Ed25519 (as after each had sent a verified RFC 9421
// signature), once to hosts it knows nothing of (draft-cavage, RSA-2048).
// The hosts are BenchmarkFanout's receivers (each host on its own loopback
// address with its own certificate from the run's CA, TLS with HTTP/2, in
// a child process that verifies every signature and digest), so the CPU
// time measured here (getrusage of this process) is courier's alone: the
// fan-out, the outbox, SQLite at synchronous=FULL, TLS, signing and the
// records. It reports the CPU of one RSA-2048 signature (measured in the
// same run) divided by courier's CPU per delivery, for each run; the goal
// for the Ed25519 run is 3 or more. Production defaults throughout (the
// production client, delivery.Config defaults, worker concurrency 128).
// Run it once:
//
//	go test ./delivery/ -run '^$' -bench FanoutEd25519 -benchtime 1x
func BenchmarkFanoutEd25519(b *testing.B) {
	ca := newBenchCA(b)
	var sign, edSign rates
	var ed, rsa time.Duration // CPU per delivery
	for b.Loop() {
		key, err := activitypub.GenerateKey()
		if err != nil {
			b.Fatal(err)
		}
		edKey, err := activitypub.GenerateEd25519Key()
		if err != nil {
			b.Fatal(err)
		}
		sign = signRate(key, time.Second)
		edSign = edSignRate(edKey, time.Second)
		ed = schemeFanoutRun(b, ca, true)
		sign = sign.best(signRate(key, time.Second))
		rsa = schemeFanoutRun(b, ca, false)
		sign = sign.best(signRate(key, time.Second))
	}
	perSig := time.Duration(float64(time.Second) / sign.cpu)
	b.ReportMetric(float64(perSig)/float64(ed), "rsa_sig_cpu/delivery_cpu_ed25519")
	b.ReportMetric(float64(perSig)/float64(rsa), "rsa_sig_cpu/delivery_cpu_rsa")
	b.ReportMetric(float64(ed.Microseconds()), "us_cpu/delivery_ed25519")
	b.ReportMetric(float64(rsa.Microseconds()), "us_cpu/delivery_rsa")
	b.Logf("GOMAXPROCS=%d, %d deliveries over %d hosts, TLS HTTP/2, receivers in a child process", runtime.GOMAXPROCS(0), benchHosts*edBenchPerHost, benchHosts)
	b.Logf("one RSA-2048 signature: %s of CPU (%.0f per CPU-second); one Ed25519 RFC 9421 signature: %s",
		perSig.Round(time.Microsecond), sign.cpu, time.Duration(float64(time.Second)/edSign.cpu).Round(time.Microsecond))
	b.Logf("RFC 9421 Ed25519 fan-out: %s of courier's CPU per delivery; RSA signature / that = %.2f (goal 3)",
		ed.Round(time.Microsecond), float64(perSig)/float64(ed))
	b.Logf("draft-cavage RSA fan-out:  %s of courier's CPU per delivery; RSA signature / that = %.2f",
		rsa.Round(time.Microsecond), float64(perSig)/float64(rsa))
}

// edSignRate signs delivery POSTs with RFC 9421 Ed25519 as the delivery
// path does, on every core, for about d.
func edSignRate(key ed25519.PrivateKey, d time.Duration) rates {
	body := []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"https://courier.example/activities/1","type":"Create"}`)
	return measure(func() int64 {
		var total atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for time.Now().Before(stop) {
					req, err := http.NewRequest(http.MethodPost, "https://h0001.bench.test/users/f1/inbox", strings.NewReader(string(body)))
					if err != nil {
						return
					}
					if err := activitypub.SignMessage(req, body, "https://courier.example/users/alice#ed25519-key", key, time.Now()); err != nil {
						return
					}
					total.Add(1)
				}
			})
		}
		wg.Wait()
		return total.Load()
	})
}

// schemeFanoutRun fans one note out to edBenchPerHost personal inboxes on
// each of BenchmarkFanout's hosts (over TLS with HTTP/2, through courier's
// production client and delivery defaults) and returns courier's CPU per
// delivery; with ed, every host is known to take RFC 9421 Ed25519.
func schemeFanoutRun(b *testing.B, ca *benchCA, ed bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	in := newInstance(b, ca)
	defer in.stop()
	spec := in.spec(ca)
	edPub, err := activitypub.EncodePublicKeyPEM(in.alice.Ed25519Key.Public())
	if err != nil {
		b.Fatal(err)
	}
	spec.Keys[activitypub.Ed25519KeyID(in.alice.URI)] = edPub
	spec.Hosts, spec.Mode = benchHosts, "tls-http2"
	rc := startReceivers(b, spec)
	defer rc.stop()
	in.followers(b, rc.hosts, edBenchPerHost, true)
	if ed {
		for _, h := range rc.hosts {
			u, err := url.Parse(h)
			if err != nil {
				b.Fatal(err)
			}
			in.svc.Schemes().AcceptsRFC9421(ctx, u.Host, activitypub.AlgEd25519)
		}
	}
	want := int64(benchHosts * edBenchPerHost)
	c0 := cpuTime()
	if _, _, err := in.st.CreateNote(ctx, in.alice, store.NoteInput{Content: "<p>one post, ten thousand inboxes</p>",
		To: []string{activitypub.Public}, CC: []string{in.st.URIs().Followers("alice")}}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var got receiverStats
	for {
		got = rc.stats(b)
		if got.Healthy >= want || got.Rejected > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d deliveries after 3 min", got.Healthy, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cpu := cpuTime() - c0
	if got.Rejected > 0 {
		b.Fatalf("%d requests failed verification at the receivers", got.Rejected)
	}
	if wantEd := map[bool]int64{true: want, false: 0}[ed]; got.Ed25519 != wantEd {
		b.Fatalf("the receivers verified %d Ed25519 deliveries, want %d", got.Ed25519, wantEd)
	}
	return cpu / time.Duration(want)
}
