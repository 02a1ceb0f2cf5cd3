//go:build unix

package delivery_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqlite"
	"github.com/courier-ap/courier/store"
)

// envSchemeReceiver runs TestSchemeBenchReceiver as the receiving side of
// BenchmarkFanoutEd25519, in a process of its own; its value is the
// directory holding the receiver's certificate and the keys it trusts.
const envSchemeReceiver = "COURIER_BENCH_SCHEME_RECEIVER"

// The shape of BenchmarkFanoutEd25519: one post fanned out to
// edBenchFollowers followers with personal inboxes, spread evenly over
// edBenchHosts simulated hosts.
const (
	edBenchFollowers = 10_000
	edBenchHosts     = 1_000
)

// BenchmarkFanoutEd25519 fans one post out to 10,000 followers on 1,000
// hosts over TLS, twice on fresh databases: once to hosts courier knows to
// accept RFC 9421 Ed25519 (as after each had sent a verified RFC 9421
// signature), once to hosts it knows nothing of (draft-cavage, RSA-2048).
// The hosts are one TLS server in a child process, routing by Host and
// verifying every signature and digest with activitypub's verifiers, so
// the CPU time measured here (getrusage of this process) is courier's
// alone: the fan-out, the outbox, SQLite at synchronous=FULL, TLS, signing
// and the records. It reports the CPU of one RSA-2048 signature (measured
// in the same run) divided by courier's CPU per delivery, for each run; the
// goal for the Ed25519 run is 3 or more. Production defaults throughout
// (delivery.Config defaults, worker concurrency 128). Run it once:
//
//	go test ./delivery/ -run '^$' -bench FanoutEd25519 -benchtime 1x
func BenchmarkFanoutEd25519(b *testing.B) {
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
		ed = schemeFanoutRun(b, true)
		sign = sign.best(signRate(key, time.Second))
		rsa = schemeFanoutRun(b, false)
		sign = sign.best(signRate(key, time.Second))
	}
	perSig := time.Duration(float64(time.Second) / sign.cpu)
	b.ReportMetric(float64(perSig)/float64(ed), "rsa_sig_cpu/delivery_cpu_ed25519")
	b.ReportMetric(float64(perSig)/float64(rsa), "rsa_sig_cpu/delivery_cpu_rsa")
	b.ReportMetric(float64(ed.Microseconds()), "us_cpu/delivery_ed25519")
	b.ReportMetric(float64(rsa.Microseconds()), "us_cpu/delivery_rsa")
	b.Logf("GOMAXPROCS=%d, %d deliveries over %d hosts, TLS, receivers in a child process", runtime.GOMAXPROCS(0), edBenchFollowers, edBenchHosts)
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

// schemeFanoutRun runs one fan-out and returns courier's CPU per delivery.
func schemeFanoutRun(b *testing.B, ed bool) time.Duration {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "courier.db"), sqlite.Options{}) // production FULL
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Apply(ctx, db.Write, migrations.Options{}); err != nil {
		b.Fatal(err)
	}
	st := store.New(db, baseURL, nil)
	alice, _, err := st.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		b.Fatal(err)
	}
	host := func(i int) string { return fmt.Sprintf("h%04d.bench.test", i) }
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range edBenchFollowers {
			uri := fmt.Sprintf("https://%s/users/f%d", host(i%edBenchHosts), i/edBenchHosts)
			if _, err := st.AddFollowerTx(ctx, tx, store.Follower{ActorID: alice.ID, URI: uri, Inbox: uri + "/inbox"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}

	pool := writeReceiverFiles(b, dir, alice)
	rcv := startReceiver(b, dir)

	dialer := &net.Dialer{Timeout: delivery.DefaultDialTimeout}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, rcv.addr)
		},
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          2 * edBenchHosts,
		MaxIdleConnsPerHost:   delivery.DefaultPerHostConcurrency,
		MaxConnsPerHost:       delivery.DefaultPerHostConcurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   delivery.DefaultDialTimeout,
		ResponseHeaderTimeout: delivery.DefaultResponseHeaderTimeout,
	}
	defer tr.CloseIdleConnections()
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{Client: &http.Client{Transport: tr},
		Signer: activitypub.Signer{KeyID: activitypub.KeyID(alice.URI), Key: mustRSA(b, alice.PrivateKeyPEM)}})
	if err != nil {
		b.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := delivery.New(delivery.Config{DB: db, Store: st, Resolver: resolver, BaseURL: baseURL,
		Client: &http.Client{Transport: tr, Timeout: delivery.DefaultTimeout}})
	if err != nil {
		b.Fatal(err)
	}
	if ed {
		for i := range edBenchHosts {
			svc.Schemes().AcceptsRFC9421(ctx, host(i), activitypub.AlgEd25519)
		}
	}
	reg := outbox.NewRegistry()
	svc.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 128,
		ShutdownGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	db.OnWrite(w.Notify)
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { _ = svc.Run(runCtx) })
	running.Go(func() { _ = w.Run(runCtx) })
	defer func() { stop(); running.Wait() }()

	c0 := cpuTime()
	if _, _, err := st.CreateNote(ctx, alice, store.NoteInput{Content: "<p>one post, ten thousand inboxes</p>",
		To: []string{activitypub.Public}, CC: []string{st.URIs().Followers("alice")}}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	var got receiverCount
	for {
		got = rcv.count(b)
		if got.Delivered >= edBenchFollowers || got.Rejected > 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d deliveries after 3 min", got.Delivered, edBenchFollowers)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cpu := cpuTime() - c0
	if got.Rejected > 0 {
		b.Fatalf("%d requests failed verification at the receiver", got.Rejected)
	}
	want := "draft-cavage"
	if ed {
		want = "rfc9421-ed25519"
	}
	if got.Schemes[want] != edBenchFollowers {
		b.Fatalf("the receiver saw schemes %v, want %d %s", got.Schemes, edBenchFollowers, want)
	}
	return cpu / edBenchFollowers
}

func mustRSA(b *testing.B, pemText string) *rsa.PrivateKey {
	b.Helper()
	k, err := activitypub.ParsePrivateKeyPEM(pemText)
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// writeReceiverFiles writes the receiver's TLS certificate and key (for
// *.bench.test) and the public keys of alice into dir, and returns a pool
// trusting the certificate.
func writeReceiverFiles(b *testing.B, dir string, alice *store.Actor) *x509.CertPool {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"*.bench.test"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	pubPEM, err := activitypub.EncodePublicKeyPEM(alice.Ed25519Key.Public())
	if err != nil {
		b.Fatal(err)
	}
	keys, err := json.Marshal(map[string]string{
		activitypub.KeyID(alice.URI):        alice.PublicKeyPEM,
		activitypub.Ed25519KeyID(alice.URI): pubPEM,
	})
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"cert.pem":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"key.pem":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"keys.json": keys,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// receiver is the child process serving the hosts.
type receiver struct {
	addr    string
	control string // plain-http address of its counts
}

type receiverCount struct {
	Delivered int            `json:"delivered"`
	Rejected  int            `json:"rejected"`
	Schemes   map[string]int `json:"schemes"`
}

// startReceiver runs TestSchemeBenchReceiver in a child process and waits
// for its addresses; it stops when the benchmark ends.
func startReceiver(b *testing.B, dir string) *receiver {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSchemeBenchReceiver$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), envSchemeReceiver+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	r := &receiver{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if a, ok := strings.CutPrefix(line, "receiver "); ok {
			r.addr, r.control, _ = strings.Cut(a, " ")
			break
		}
	}
	if r.addr == "" {
		b.Fatalf("the receiver did not start: %v", sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return r
}

func (r *receiver) count(b *testing.B) receiverCount {
	b.Helper()
	resp, err := http.Get("http://" + r.control + "/count")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var c receiverCount
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		b.Fatal(err)
	}
	return c
}

// TestSchemeBenchReceiver is the receiving side of BenchmarkFanoutEd25519
// when run as its child process (skipped otherwise): a TLS server for
// every *.bench.test host that verifies each POST's signature (RFC 9421 or
// draft-cavage) and Content-Digest or Digest against the keys in keys.json,
// answers 202, and counts the distinct inboxes reached per scheme on a
// plain-http control listener. It exits when its stdin closes.
func TestSchemeBenchReceiver(t *testing.T) {
	dir := os.Getenv(envSchemeReceiver)
	if dir == "" {
		t.Skip("the receiver of BenchmarkFanoutEd25519, run by it in a child process")
	}
	raw, err := os.ReadFile(filepath.Join(dir, "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pems map[string]string
	if err := json.Unmarshal(raw, &pems); err != nil {
		t.Fatal(err)
	}
	keys := map[string]any{}
	for id, p := range pems {
		if keys[id], err = activitypub.ParsePublicKeyPEM(p); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	counts := receiverCount{Schemes: map[string]int{}}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			var p *activitypub.SignatureParams
			if err == nil {
				p, err = activitypub.RequestSignature(r)
			}
			if err == nil {
				err = activitypub.VerifySignature(r, p, body, keys[p.KeyID], activitypub.VerifyOptions{})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !strings.HasSuffix(r.Host, ".bench.test") {
				counts.Rejected++
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if !seen[r.Host+r.URL.Path] {
				seen[r.Host+r.URL.Path] = true
				counts.Delivered++
				scheme := "draft-cavage"
				if p.IsMessageSignature() {
					scheme = "rfc9421-" + p.Algorithm
				}
				counts.Schemes[scheme]++
			}
			w.WriteHeader(http.StatusAccepted)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	control := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(counts)
	})}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	wg.Go(func() { _ = control.Serve(ctl) })
	fmt.Printf("receiver %s %s\n", ln.Addr(), ctl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	_ = control.Close()
	wg.Wait()
}
