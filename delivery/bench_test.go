//go:build unix

package delivery_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqlite"
	"github.com/courier-ap/courier/store"
)

// Benchmark shape: one post fanned out to benchFollowers followers with
// personal inboxes, spread evenly over benchHosts simulated hosts.
const (
	benchFollowers = 10_000
	benchHosts     = 1_000
)

// BenchmarkFanout10k fans one post out to 10,000 followers on 1,000
// simulated hosts served by one loopback httptest server that routes by
// Host and verifies every signature and digest, and reports deliveries per
// second against the RSA-2048 signatures per second the same cores make
// (measured in the same run). A second run sends 20% of the hosts to a
// listener that accepts connections and never answers, and reports the
// healthy hosts' throughput against the first run. Run it once:
//
//	go test ./delivery/ -run '^$' -bench Fanout10k -benchtime 1x
//
// The machine may be shared, so besides wall-clock rates it reports rates
// per CPU-second of this process (getrusage), which other load does not
// skew: the delivery figure then includes everything the process did for
// a delivery (the fan-out, the database, the receiving server's
// verification), against the cost of a signature alone.
func BenchmarkFanout10k(b *testing.B) {
	var sign, healthy, hung rates
	for b.Loop() {
		key, err := activitypub.GenerateKey()
		if err != nil {
			b.Fatal(err)
		}
		// The signing ceiling is measured before, between and after the
		// runs; the best figure counts.
		sign = signRate(key, time.Second)
		healthy = fanoutRun(b, 0)
		sign = sign.best(signRate(key, time.Second))
		hung = fanoutRun(b, 0.2)
		sign = sign.best(signRate(key, time.Second))
	}
	b.ReportMetric(sign.wall, "signatures/s")
	b.ReportMetric(healthy.wall, "deliveries/s")
	b.ReportMetric(healthy.wall/sign.wall, "ratio_to_signing")
	b.ReportMetric(healthy.cpu/sign.cpu, "ratio_to_signing_cpu")
	b.ReportMetric(hung.wall, "healthy_deliveries/s_20%_hung")
	b.ReportMetric(hung.wall/healthy.wall, "ratio_hung_to_healthy")
	b.Logf("GOMAXPROCS=%d, %d deliveries over %d hosts", runtime.GOMAXPROCS(0), benchFollowers, benchHosts)
	b.Logf("RSA-2048 signatures: %.0f/s wall, %.0f per CPU-second", sign.wall, sign.cpu)
	b.Logf("all hosts healthy:   %.0f deliveries/s wall (ratio %.2f), %.0f per CPU-second (ratio %.2f)",
		healthy.wall, healthy.wall/sign.wall, healthy.cpu, healthy.cpu/sign.cpu)
	b.Logf("20%% of hosts hung:   %.0f healthy deliveries/s wall (ratio %.2f of all-healthy), %.0f per CPU-second (ratio %.2f)",
		hung.wall, hung.wall/healthy.wall, hung.cpu, hung.cpu/healthy.cpu)
}

// rates is a throughput per wall-clock second and per CPU-second of the
// process.
type rates struct{ wall, cpu float64 }

func (r rates) best(o rates) rates { return rates{max(r.wall, o.wall), max(r.cpu, o.cpu)} }

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func measure(n func() int64) rates {
	c0, t0 := cpuTime(), time.Now()
	count := float64(n())
	return rates{wall: count / time.Since(t0).Seconds(), cpu: count / (cpuTime() - c0).Seconds()}
}

// signRate signs delivery POSTs as the delivery path does
// (activitypub.SignRequest), on every core, for about d.
func signRate(key *rsa.PrivateKey, d time.Duration) rates {
	body := []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"https://courier.example/activities/1","type":"Create","actor":"https://courier.example/users/alice","object":{"id":"https://courier.example/objects/1","type":"Note","content":"<p>one post, ten thousand inboxes</p>"}}`)
	return measure(func() int64 {
		var total atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for time.Now().Before(stop) {
					req, err := http.NewRequest(http.MethodPost, "http://h0001.bench.test/users/f1/inbox", bytes.NewReader(body))
					if err != nil {
						return
					}
					if err := activitypub.SignRequest(req, body, "https://courier.example/users/alice#main-key", key, time.Now()); err != nil {
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

// fanoutRun runs one fan-out of a post to benchFollowers followers and
// returns the deliveries per second to healthy hosts; hungShare of the
// hosts never answer.
func fanoutRun(b *testing.B, hungShare float64) rates {
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
	priv, err := activitypub.ParsePrivateKeyPEM(alice.PrivateKeyPEM)
	if err != nil {
		b.Fatal(err)
	}
	keys := &keyring{m: map[string]*rsa.PublicKey{activitypub.KeyID(alice.URI): &priv.PublicKey}}

	hungHosts := int(float64(benchHosts) * hungShare)
	host := func(i int) string { return fmt.Sprintf("h%04d.bench.test", i) }
	isHung := func(h string) bool {
		var i int
		_, err := fmt.Sscanf(h, "h%04d.bench.test", &i)
		return err == nil && i < hungHosts
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range benchFollowers {
			h := host(i % benchHosts)
			uri := fmt.Sprintf("http://%s/users/f%d", h, i/benchHosts)
			if _, err := st.AddFollowerTx(ctx, tx, store.Follower{ActorID: alice.ID, URI: uri, Inbox: uri + "/inbox"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}

	// The healthy hosts: one server, routing by Host, verifying everything.
	var delivered, rejected atomic.Int64
	seen := sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || !strings.HasSuffix(r.Host, ".bench.test") || isHung(r.Host) {
			rejected.Add(1)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		if _, err := verifyCavage(r, body, keys, time.Now()); err != nil {
			rejected.Add(1)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if _, dup := seen.LoadOrStore(r.Host+r.URL.Path, true); !dup {
			delivered.Add(1)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	// The hung hosts: a listener that accepts and never answers.
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var held sync.WaitGroup
	var conns sync.Map
	held.Go(func() {
		for {
			c, err := hold.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			// Read the request and never answer; close when the client
			// gives up.
			held.Go(func() {
				_, _ = io.Copy(io.Discard, c)
				c.Close()
				conns.Delete(c)
			})
		}
	})
	defer func() {
		hold.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		held.Wait()
	}()

	// The test-only dial override: every host name goes to one of the two
	// loopback listeners.
	srvAddr, holdAddr := srv.Listener.Addr().String(), hold.Addr().String()
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h, _, _ := net.SplitHostPort(addr)
			if isHung(h) {
				return dialer.DialContext(ctx, network, holdAddr)
			}
			return dialer.DialContext(ctx, network, srvAddr)
		},
		MaxIdleConns: 2 * benchHosts, MaxIdleConnsPerHost: 4, MaxConnsPerHost: 4,
		IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 2 * time.Second,
	}
	defer tr.CloseIdleConnections()
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: &http.Client{Transport: tr}, Signer: activitypub.Signer{KeyID: activitypub.KeyID(alice.URI), Key: priv}})
	if err != nil {
		b.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := delivery.New(delivery.Config{
		DB: db, Store: st, Resolver: resolver, BaseURL: baseURL,
		Client:             &http.Client{Transport: tr, Timeout: 5 * time.Second},
		PerHostConcurrency: 4, SlotWait: 100 * time.Millisecond, SlotDefer: 2 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	reg := outbox.NewRegistry()
	svc.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{
		DB: db.Write, Read: db.Read, Registry: reg, Concurrency: 512, BatchSize: 256,
		PollInterval: 5 * time.Millisecond, ShutdownGrace: time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	db.OnWrite(w.Notify)
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { _ = svc.Run(runCtx) })
	running.Go(func() { _ = w.Run(runCtx) })
	defer func() { stop(); running.Wait() }()

	want := int64(benchFollowers - hungHosts*benchFollowers/benchHosts)
	r := measure(func() int64 {
		if _, _, err := st.CreateNote(ctx, alice, store.NoteInput{Content: "<p>one post, ten thousand inboxes</p>",
			To: []string{activitypub.Public}, CC: []string{st.URIs().Followers("alice")}}); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(90 * time.Second)
		for delivered.Load() < want {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d healthy deliveries after 90 s (%d rejected)", delivered.Load(), want, rejected.Load())
			}
			time.Sleep(2 * time.Millisecond)
		}
		return want
	})
	if n := rejected.Load(); n != 0 {
		b.Fatalf("%d requests failed verification", n)
	}
	return r
}
