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
	"github.com/courier-ap/courier/store/notetest"
)

// edBenchPerHost is how many followers with personal inboxes alice has on
// each of BenchmarkFanout's benchHosts hosts in BenchmarkFanoutEd25519:
// one post, 10,000 deliveries.
const edBenchPerHost = 10

// BenchmarkFanoutEd25519 fans posts out to 10,000 followers on 1,000
// hosts over TLS, on fresh databases: once to hosts courier knows to
// accept RFC 9421 Ed25519 (as after each had sent a verified RFC 9421
// signature), once to hosts it knows nothing of (draft-cavage, RSA-2048).
// Each run posts twice: the first post reaches hosts courier has no
// connection to (a TLS handshake per host, 10 deliveries per connection),
// the second, right after, the same inboxes over the connections kept
// (a server that delivers all day). The hosts are BenchmarkFanout's
// receivers (each host on its own loopback address with its own
// certificate from the run's CA, TLS with HTTP/2, in a child process that
// verifies every signature and digest), so the CPU time measured here
// (getrusage of this process) is courier's alone: the fan-out, the outbox,
// SQLite at synchronous=FULL, TLS, signing and the records. It reports the
// CPU of one RSA-2048 signature (measured in the same run) divided by
// courier's CPU per delivery, for each post of each run; the goal for the
// Ed25519 run is 3 or more. Production defaults throughout (the production
// client, delivery.Config defaults, worker concurrency 128). Run it once:
//
//	go test ./delivery/ -run '^$' -bench FanoutEd25519 -benchtime 1x
func BenchmarkFanoutEd25519(b *testing.B) {
	ca := newBenchCA(b)
	var sign, edSign rates
	var ed, edWarm, rsa, rsaWarm time.Duration // CPU per delivery
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
		ed, edWarm = schemeFanoutRun(b, ca, true)
		sign = sign.best(signRate(key, time.Second))
		rsa, rsaWarm = schemeFanoutRun(b, ca, false)
		sign = sign.best(signRate(key, time.Second))
	}
	perSig := time.Duration(float64(time.Second) / sign.cpu)
	ratio := func(d time.Duration) float64 { return float64(perSig) / float64(d) }
	b.ReportMetric(ratio(ed), "rsa_sig_cpu/delivery_cpu_ed25519")
	b.ReportMetric(ratio(edWarm), "rsa_sig_cpu/delivery_cpu_ed25519_kept_conns")
	b.ReportMetric(ratio(rsa), "rsa_sig_cpu/delivery_cpu_rsa")
	b.ReportMetric(ratio(rsaWarm), "rsa_sig_cpu/delivery_cpu_rsa_kept_conns")
	b.ReportMetric(float64(ed.Microseconds()), "us_cpu/delivery_ed25519")
	b.ReportMetric(float64(edWarm.Microseconds()), "us_cpu/delivery_ed25519_kept_conns")
	b.Logf("GOMAXPROCS=%d, %d deliveries over %d hosts per post, TLS HTTP/2, receivers in a child process", runtime.GOMAXPROCS(0), benchHosts*edBenchPerHost, benchHosts)
	b.Logf("one RSA-2048 signature: %s of CPU (%.0f per CPU-second); one Ed25519 RFC 9421 signature: %s",
		perSig.Round(time.Microsecond), sign.cpu, time.Duration(float64(time.Second)/edSign.cpu).Round(time.Microsecond))
	b.Logf("RFC 9421 Ed25519 fan-out, new connections: %s of courier's CPU per delivery; RSA signature / that = %.2f (goal 3)",
		ed.Round(time.Microsecond), ratio(ed))
	b.Logf("RFC 9421 Ed25519 fan-out, kept connections: %s; RSA signature / that = %.2f (goal 3)",
		edWarm.Round(time.Microsecond), ratio(edWarm))
	b.Logf("draft-cavage RSA fan-out, new connections: %s; RSA signature / that = %.2f; kept connections: %s, %.2f",
		rsa.Round(time.Microsecond), ratio(rsa), rsaWarm.Round(time.Microsecond), ratio(rsaWarm))
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

// schemeFanoutRun fans two notes, one after the other, out to
// edBenchPerHost personal inboxes on each of BenchmarkFanout's hosts (over
// TLS with HTTP/2, through courier's production client and delivery
// defaults) and returns courier's CPU per delivery of each; with ed, every
// host is known to take RFC 9421 Ed25519.
func schemeFanoutRun(b *testing.B, ca *benchCA, ed bool) (cold, warm time.Duration) {
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
	per := int64(benchHosts * edBenchPerHost)
	var cpus [2]time.Duration
	for i, content := range []string{"<p>one post, ten thousand inboxes</p>", "<p>and one more, to the same inboxes</p>"} {
		want := per * int64(i+1)
		c0 := cpuTime()
		if _, _, err := notetest.Create(ctx, in.st, in.alice, notetest.Input{Content: content,
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
				b.Fatalf("post %d: only %d of %d deliveries after 3 min", i+1, got.Healthy, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cpus[i] = (cpuTime() - c0) / time.Duration(per)
		if got.Rejected > 0 {
			b.Fatalf("%d requests failed verification at the receivers", got.Rejected)
		}
		if wantEd := map[bool]int64{true: want, false: 0}[ed]; got.Ed25519 != wantEd {
			b.Fatalf("the receivers verified %d Ed25519 deliveries, want %d", got.Ed25519, wantEd)
		}
	}
	return cpus[0], cpus[1]
}
