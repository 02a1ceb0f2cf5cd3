//go:build unix

package delivery_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// faultMode is the transport of the hung and slow runs and of the
// all-healthy runs they are compared with: TLS with HTTP/2 offered (ALPN
// h2 and http/1.1), as real servers offer it, on hosts reached by name
// (hostN.test, resolved to the host's loopback address by the client's
// LookupHost).
const faultMode = "tls-http2-name"

// Benchmark shape, as an instance sees it: benchHosts simulated hosts, each
// on its own loopback address (127.0.x.y) with its own certificate from a
// CA made in the run, each with benchPerHost followers of one local actor
// sharing the host's inbox; benchNotes public notes, so every host gets
// benchNotes deliveries in a burst.
const (
	benchHosts   = 1_000
	benchPerHost = 10
	benchNotes   = 10
	// benchConcurrency is courier serve's --concurrency default.
	benchConcurrency = 128
	// benchBacklog is the bulk fan-out an Accept is enqueued behind.
	benchBacklog = 100_000
)

// BenchmarkFanout sends benchNotes notes to benchHosts hosts through the
// real outbox db worker and delivery service at the production defaults
// (activitypub.NewClient's and delivery's timeouts, concurrency and
// per-host limits; the worker's defaults with courier serve's
// --concurrency) and reports, in one run:
//
//   - the CPU of one RSA-2048 signature ÷ courier's own CPU per delivery
//     (the receivers run in a child process, so their verifying is not
//     counted), the signature's CPU measured twice: by signRate before and
//     after the runs (the best of three; ratio_to_signing_cpu) and by a
//     probe signing a few POSTs ten times a second during each run, its
//     CPU left out of courier's (signProbe; _same_time), since a shared
//     machine's speed drifts between the two; and the wall-clock ratio of
//     deliveries/s to signatures/s;
//   - with 20% of the hosts hung (they accept, complete TLS and the HTTP/2
//     preface, read the POST and never answer) and, separately, 20% slow (each POST answered after
//     10 s): the healthy hosts' deliveries/s ÷ the all-healthy rate of the
//     same transport, the mean of the all-healthy runs just before and just
//     after the faulty one, as measured and with each rate over its run's
//     probe's signing speed (_same_speed);
//   - new connections per delivery, over HTTP/1.1, TLS with HTTP/1.1 only,
//     and TLS with HTTP/2;
//   - duplicate POSTs (one activity twice at one inbox) in fault-free runs;
//   - how long an Accept enqueued behind benchBacklog pending deliveries of
//     a fan-out takes to reach its inbox.
//
// Run it once (about three minutes on two cores):
//
//	go test ./delivery/ -run '^$' -bench 'BenchmarkFanout$' -benchtime 1x -timeout 20m
func BenchmarkFanout(b *testing.B) {
	ca := newBenchCA(b)
	for b.Loop() {
		key, err := activitypub.GenerateKey()
		if err != nil {
			b.Fatal(err)
		}
		sign := signRate(key, time.Second)
		plain := fanoutRun(b, ca, "http1", 0, 0)
		h2 := fanoutRun(b, ca, "tls-http2", 0, 0)
		sign = sign.best(signRate(key, time.Second))
		tls1 := fanoutRun(b, ca, "tls-http1", 0, 0)
		// The hung and the slow run each come between two all-healthy
		// runs of the same transport and are compared with both, since
		// the shared machine's speed drifts from run to run: TLS with
		// HTTP/2 offered (h2 and http/1.1), as real servers offer it, on
		// hosts reached by name.
		named := fanoutRun(b, ca, faultMode, 0, 0)
		hung := fanoutRun(b, ca, faultMode, 0.2, 0)
		namedB := fanoutRun(b, ca, faultMode, 0, 0)
		slow := fanoutRun(b, ca, faultMode, 0, 0.2)
		namedC := fanoutRun(b, ca, faultMode, 0, 0)
		sign = sign.best(signRate(key, time.Second))
		accept := acceptRun(b, ca)
		hungRef, slowRef := around(named, namedB), around(namedB, namedC)

		b.ReportMetric(sign.wall, "signatures/s")
		for _, r := range []struct {
			name string
			res  runResult
		}{{"http1", plain}, {"tls_http1", tls1}, {"tls_http2", h2}} {
			b.ReportMetric(r.res.rate.wall, r.name+"_deliveries/s")
			b.ReportMetric(r.res.rate.cpu/sign.cpu, r.name+"_ratio_to_signing_cpu")
			b.ReportMetric(r.res.rate.cpu/r.res.signCPU, r.name+"_ratio_to_signing_cpu_same_time")
			b.ReportMetric(r.res.rate.wall/sign.wall, r.name+"_ratio_to_signing_wall")
			b.ReportMetric(r.res.connsPerDelivery(), r.name+"_new_conns/delivery")
			b.ReportMetric(float64(r.res.stats.Duplicates), r.name+"_duplicates")
		}
		b.ReportMetric(hung.rate.wall/hungRef.wall, "ratio_20%_hung_to_healthy")
		b.ReportMetric(slow.rate.wall/slowRef.wall, "ratio_20%_slow_to_healthy")
		b.ReportMetric(hung.speedAdjusted()/hungRef.adjusted, "ratio_20%_hung_to_healthy_same_speed")
		b.ReportMetric(float64(hung.hungPosts()), "posts_to_hung_hosts")
		b.ReportMetric(slow.speedAdjusted()/slowRef.adjusted, "ratio_20%_slow_to_healthy_same_speed")
		b.ReportMetric(accept.Seconds(), "accept_behind_100k_s")

		b.Logf("GOMAXPROCS=%d; %d hosts x %d followers (shared inbox) x %d notes = %d deliveries; worker concurrency %d; production timeouts",
			runtime.GOMAXPROCS(0), benchHosts, benchPerHost, benchNotes, benchHosts*benchNotes, benchConcurrency)
		b.Logf("RSA-2048 signatures: %.0f/s wall on every core, %.0f per CPU-second", sign.wall, sign.cpu)
		for _, r := range []struct {
			name string
			res  runResult
		}{{"HTTP/1.1     ", plain}, {"TLS HTTP/1.1 ", tls1}, {"TLS HTTP/2   ", h2}} {
			b.Logf("%s all healthy: %.0f deliveries/s wall (ratio %.2f), %.0f per courier CPU-second (ratio %.2f; %.2f to the %.0f signatures per CPU-second measured during the run); %.3f new connections/delivery, %.2f of handshakes resumed; %d duplicates",
				r.name, r.res.rate.wall, r.res.rate.wall/sign.wall, r.res.rate.cpu, r.res.rate.cpu/sign.cpu, r.res.rate.cpu/r.res.signCPU, r.res.signCPU,
				r.res.connsPerDelivery(), r.res.resumedShare(), r.res.stats.Duplicates)
		}
		b.Logf("TLS HTTP/2 offered, by name, all healthy: %.0f, %.0f and %.0f deliveries/s wall", named.rate.wall, namedB.rate.wall, namedC.rate.wall)
		b.Logf("TLS HTTP/2 offered, by name, 20%% hung: %.0f healthy deliveries/s (ratio %.2f of the all-healthy runs around it; %.2f at the same signing speed); %.3f new connections/delivery",
			hung.rate.wall, hung.rate.wall/hungRef.wall, hung.speedAdjusted()/hungRef.adjusted, hung.connsPerDelivery())
		b.Logf("TLS HTTP/2 offered, by name, 20%% slow: %.0f healthy deliveries/s (ratio %.2f of the all-healthy runs around it; %.2f at the same signing speed); %d duplicates",
			slow.rate.wall, slow.rate.wall/slowRef.wall, slow.speedAdjusted()/slowRef.adjusted, slow.stats.Duplicates)
		b.Logf("an Accept enqueued behind %d pending deliveries of a fan-out reached its inbox after %s", benchBacklog, accept.Round(time.Millisecond))
	}
}

// measureProbed measures n as measure does while a signProbe runs (with
// benchProbeKey), and returns the rates with the probe's CPU left out and
// the signatures per CPU-second the probe measured meanwhile.
func measureProbed(b testing.TB, n func() int64) (rates, float64) {
	b.Helper()
	key, err := benchProbeKey()
	if err != nil {
		b.Fatal(err)
	}
	probe := startSignProbe(key)
	var count int64
	r := measure(func() int64 { count = n(); return count })
	signCPU, probeCPU := probe.end()
	if cpu := float64(count)/r.cpu - probeCPU.Seconds(); cpu > 0 {
		r.cpu = float64(count) / cpu
	}
	return r, signCPU
}

// rates is a throughput per wall-clock second and per CPU-second of this
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

// signOnce signs one delivery POST of benchSignBody as the delivery path
// does (activitypub.SignRequest): the unit signRate and signProbe count.
func signOnce(key *rsa.PrivateKey) error {
	req, err := http.NewRequest(http.MethodPost, "https://127.0.2.1:4430/inbox", bytes.NewReader(benchSignBody))
	if err != nil {
		return err
	}
	return activitypub.SignRequest(req, benchSignBody, "https://courier.example/users/alice#main-key", key, time.Now())
}

// benchSignBody is the body signOnce signs.
var benchSignBody = []byte(`{"@context":"https://www.w3.org/ns/activitystreams","id":"https://courier.example/activities/1","type":"Create","actor":"https://courier.example/users/alice","object":{"id":"https://courier.example/objects/1","type":"Note","content":"<p>one post, ten thousand inboxes</p>"}}`)

// signRate signs delivery POSTs as the delivery path does
// (activitypub.SignRequest), on every core, for about d.
func signRate(key *rsa.PrivateKey, d time.Duration) rates {
	return measure(func() int64 {
		var total atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if signOnce(key) != nil {
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

// signProbe measures what an RSA-2048 signature costs while a run goes on:
// every signProbeEvery it signs signProbeBurst delivery POSTs (after one
// more, untimed) on a goroutine locked to its thread, timed by that
// thread's CPU clock. The
// machines are shared, and a core's speed drifts by a third within
// minutes: signing measured before and after a run, as signRate does, may
// meet another machine than the run did. The probe's CPU is taken out of
// the run's (runResult.rate).
type signProbe struct {
	stop, done chan struct{}
	sigs       int64
	cpu        time.Duration // of the timed signatures
	all        time.Duration // of every signature, the untimed ones too
}

const (
	signProbeEvery = 100 * time.Millisecond
	signProbeBurst = 5
)

func startSignProbe(key *rsa.PrivateKey) *signProbe {
	p := &signProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(signProbeEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			// The first signature of a burst warms the caches the run's
			// work left cold and is not counted: signRate's loop, which
			// the probe stands in for, signs with warm caches.
			var c0 time.Duration
			start := threadCPU()
			for i := range signProbeBurst + 1 {
				if i == 1 {
					c0 = threadCPU()
				}
				if signOnce(key) != nil {
					return
				}
			}
			end := threadCPU()
			p.cpu += end - c0
			p.all += end - start
			p.sigs += signProbeBurst
		}
	}()
	return p
}

// end stops p and returns its signatures per CPU-second (the timed ones)
// and all the CPU it used (the untimed signatures too), which is not
// courier's.
func (p *signProbe) end() (float64, time.Duration) {
	close(p.stop)
	<-p.done
	if p.cpu <= 0 {
		return 0, 0
	}
	return float64(p.sigs) / p.cpu.Seconds(), p.all
}

// benchProbeKey is the RSA-2048 key the runs' probes sign with.
var benchProbeKey = sync.OnceValues(activitypub.GenerateKey)

// threadCPU is the CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

// benchCA is a throwaway certificate authority; its PEM goes to the
// receivers' process, which issues each host's certificate.
type benchCA struct {
	certPEM, keyPEM []byte
	pool            *x509.CertPool
}

func newBenchCA(b testing.TB) *benchCA {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "courier bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &benchCA{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		pool:    pool,
	}
}

// receiverSpec configures the receivers' process.
type receiverSpec struct {
	Hosts  int     `json:"hosts"`
	Mode   string  `json:"mode"` // http1, tls-http1, tls-http2, tls-http2-name
	Hung   float64 `json:"hung"`
	Slow   float64 `json:"slow"`
	CACert string  `json:"ca_cert"`
	CAKey  string  `json:"ca_key"`
	// Keys are the public keys (SPKI PEM) the receivers trust, by key id.
	Keys map[string]string `json:"keys"`
}

// receiverStats is what the receivers counted.
type receiverStats struct {
	Healthy    int64 `json:"healthy"`    // distinct (inbox, activity) at healthy hosts
	Slow       int64 `json:"slow"`       // distinct (inbox, activity) at slow hosts
	Duplicates int64 `json:"duplicates"` // a POST of an (inbox, activity) seen before
	Rejected   int64 `json:"rejected"`   // failed verification
	Posts      int64 `json:"posts"`
	Conns      int64 `json:"conns"` // new connections at healthy and slow hosts
	Handshakes int64 `json:"handshakes"`
	Resumed    int64 `json:"resumed"`
	AcceptAt   int64 `json:"accept_at"` // Unix ns of the first Accept's arrival
	Ed25519    int64 `json:"ed25519"`   // POSTs signed with RFC 9421 ed25519 that verified
}

// benchNames maps the receivers' host names (hostN.test, in the -name
// modes) to their loopback addresses: the delivery client's LookupHost.
var benchNames sync.Map

func lookupBenchName(_ context.Context, host string) ([]netip.Addr, error) {
	if a, ok := benchNames.Load(host); ok {
		return []netip.Addr{a.(netip.Addr)}, nil
	}
	return nil, fmt.Errorf("%s: no such bench host", host)
}

// receivers is the child process serving the simulated hosts.
type receivers struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	hosts   []string // https://127.0.x.y:port
	control string
}

const receiversEnv = "COURIER_BENCH_RECEIVERS"

// TestMain runs the receivers' process when the benchmark starts this
// binary as one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(receiversEnv); spec != "" {
		if err := serveReceivers(spec); err != nil {
			fmt.Fprintln(os.Stderr, "receivers:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(storetest.Main(m))
}

func startReceivers(b testing.TB, spec receiverSpec) *receivers {
	b.Helper()
	js, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), receiversEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var hello struct {
		Hosts   []string          `json:"hosts"`
		Control string            `json:"control"`
		Names   map[string]string `json:"names"`
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &hello) != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("receivers did not start: %v %q", err, line)
	}
	for name, ip := range hello.Names {
		benchNames.Store(name, netip.MustParseAddr(ip))
	}
	r := &receivers{cmd: cmd, stdin: stdin, hosts: hello.Hosts, control: hello.Control}
	b.Cleanup(r.stop)
	return r
}

func (r *receivers) stop() {
	if r.stdin != nil {
		r.stdin.Close()
		r.stdin = nil
		_ = r.cmd.Wait()
	}
}

func (r *receivers) stats(b testing.TB) receiverStats {
	b.Helper()
	resp, err := http.Get(r.control)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var st receiverStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		b.Fatal(err)
	}
	return st
}

// serveReceivers is the receivers' process: it serves spec's hosts until
// its stdin closes.
func serveReceivers(specJSON string) error {
	var spec receiverSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return err
	}
	caBlock, _ := pem.Decode([]byte(spec.CACert))
	keyBlock, _ := pem.Decode([]byte(spec.CAKey))
	if caBlock == nil || keyBlock == nil {
		return fmt.Errorf("bad CA")
	}
	caCert, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return err
	}
	keys := &keyring{m: map[string]*rsa.PublicKey{}}
	pubs := map[string]crypto.PublicKey{} // every key, for RFC 9421
	for id, p := range spec.Keys {
		pub, err := activitypub.ParsePublicKeyPEM(p)
		if err != nil {
			return err
		}
		pubs[id] = pub
		if rsaPub, ok := pub.(*rsa.PublicKey); ok {
			keys.put(id, rsaPub)
		}
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}

	var st struct {
		healthy, slow, dups, rejected, posts, conns, handshakes, resumed, acceptAt, ed25519 atomic.Int64
	}
	var seen sync.Map
	hang := make(chan struct{})
	hungN, slowN := int(float64(spec.Hosts)*spec.Hung), int(float64(spec.Hosts)*spec.Slow)
	var servers []*http.Server
	var hosts []string
	names := map[string]string{}
	byName := strings.HasSuffix(spec.Mode, "-name")
	for i := range spec.Hosts {
		ip := net.IPv4(127, 0, 2+byte(i/250), 1+byte(i%250))
		hung, slow := i >= spec.Hosts-hungN, i >= spec.Hosts-hungN-slowN && i < spec.Hosts-hungN
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			return err
		}
		origin := "http://" + ln.Addr().String()
		name := fmt.Sprintf("host%d.test", i)
		if byName {
			// Reached by name, as real hosts are: the name resolves to
			// the host's loopback address through the client's
			// LookupHost.
			origin = "http://" + net.JoinHostPort(name, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
			names[name] = ip.String()
		}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				// The Accept's recipient, for the resolver.
				base := "https://" + r.Host
				if r.TLS == nil {
					base = "http://" + r.Host
				}
				w.Header().Set("Content-Type", activitypub.ContentType)
				_ = json.NewEncoder(w).Encode(map[string]any{
					"@context": activitypub.ActivityStreams, "id": base + r.URL.Path, "type": "Person",
					"inbox": base + r.URL.Path + "/inbox", "preferredUsername": "x",
				})
				return
			}
			st.posts.Add(1)
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				return
			}
			if hung {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
				return
			}
			if err := verifyAny(r, body, keys, pubs); err != nil {
				st.rejected.Add(1)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if r.Header.Get("Signature-Input") != "" && strings.Contains(r.Header.Get("Signature-Input"), `alg="ed25519"`) {
				st.ed25519.Add(1)
			}
			var a struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			_ = json.Unmarshal(body, &a)
			if a.Type == "Accept" {
				st.acceptAt.CompareAndSwap(0, time.Now().UnixNano())
			}
			if slow {
				select {
				case <-time.After(10 * time.Second):
				case <-hang:
					return
				}
			}
			if _, dup := seen.LoadOrStore(r.Host+r.URL.Path+" "+a.ID, true); dup {
				st.dups.Add(1)
			} else if slow {
				st.slow.Add(1)
			} else {
				st.healthy.Add(1)
			}
			w.WriteHeader(http.StatusAccepted)
		})
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second,
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew && !hung {
					st.conns.Add(1)
				}
			}}
		if spec.Mode != "http1" {
			tmpl := &x509.Certificate{
				SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: ip.String()},
				NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
				IPAddresses: []net.IP{ip}, DNSNames: []string{name}, KeyUsage: x509.KeyUsageDigitalSignature,
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &leafKey.PublicKey, caKey)
			if err != nil {
				return err
			}
			protos := []string{"http/1.1"}
			if strings.HasPrefix(spec.Mode, "tls-http2") {
				protos = []string{"h2", "http/1.1"}
			}
			srv.TLSConfig = &tls.Config{
				Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: leafKey}},
				NextProtos:   protos,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if !hung {
						st.handshakes.Add(1)
						if cs.DidResume {
							st.resumed.Add(1)
						}
					}
					return nil
				},
			}
			if spec.Mode == "tls-http1" {
				srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
			}
			ln = tls.NewListener(ln, srv.TLSConfig)
			origin = "https://" + strings.TrimPrefix(origin, "http://")
		}
		go func() { _ = srv.Serve(ln) }()
		servers = append(servers, srv)
		hosts = append(hosts, origin)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() {
		_ = http.Serve(ctl, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(receiverStats{
				Healthy: st.healthy.Load(), Slow: st.slow.Load(), Duplicates: st.dups.Load(),
				Rejected: st.rejected.Load(), Posts: st.posts.Load(), Conns: st.conns.Load(),
				Handshakes: st.handshakes.Load(), Resumed: st.resumed.Load(), AcceptAt: st.acceptAt.Load(),
				Ed25519: st.ed25519.Load(),
			})
		}))
	}()
	hello, _ := json.Marshal(map[string]any{"hosts": hosts, "control": "http://" + ctl.Addr().String(), "names": names})
	fmt.Println(string(hello))
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(hang)
	for _, s := range servers {
		_ = s.Close()
	}
	ctl.Close()
	return nil
}

// verifyAny verifies a draft-cavage signature with the test's own
// verifier, and an RFC 9421 one (courier's Ed25519 deliveries) with
// activitypub's.
func verifyAny(r *http.Request, body []byte, keys *keyring, pubs map[string]crypto.PublicKey) error {
	if r.Header.Get("Signature-Input") == "" {
		_, err := verifyCavage(r, body, keys, time.Now())
		return err
	}
	p, err := activitypub.RequestSignature(r)
	if err != nil {
		return err
	}
	pub, ok := pubs[p.KeyID]
	if !ok {
		return fmt.Errorf("unknown key %s", p.KeyID)
	}
	return activitypub.VerifySignature(r, p, body, pub, activitypub.VerifyOptions{})
}

// runResult is one fan-out run's figures.
type runResult struct {
	rate  rates // healthy deliveries per second of wall clock and of this process's CPU (the probe's left out)
	stats receiverStats
	// signCPU is RSA-2048 signatures per CPU-second as the run's probe
	// measured them, at the same time (signProbe).
	signCPU float64
}

// speedAdjusted is the run's wall-clock rate over the signing speed its
// probe measured: runs a minute apart on a shared machine meet cores of
// different speeds, and the hung and slow runs are compared with the
// all-healthy one at equal speed by this.
func (r runResult) speedAdjusted() float64 {
	if r.signCPU <= 0 {
		return 0
	}
	return r.rate.wall / r.signCPU
}

// reference is what a faulty run is compared with: the mean of the
// all-healthy runs on either side of it, as measured and at the same
// signing speed.
type reference struct{ wall, adjusted float64 }

func around(before, after runResult) reference {
	return reference{
		wall:     (before.rate.wall + after.rate.wall) / 2,
		adjusted: (before.speedAdjusted() + after.speedAdjusted()) / 2,
	}
}

// hungPosts is the POSTs the hung hosts read (each signed for nothing).
func (r runResult) hungPosts() int64 {
	return r.stats.Posts - r.stats.Healthy - r.stats.Slow - r.stats.Duplicates
}

func (r runResult) connsPerDelivery() float64 {
	return float64(r.stats.Conns) / float64(max(r.stats.Healthy+r.stats.Slow, 1))
}

func (r runResult) resumedShare() float64 {
	return float64(r.stats.Resumed) / float64(max(r.stats.Handshakes, 1))
}

// instance is courier's side of a run: a database, an actor, the delivery
// service and the db worker at the production defaults.
type instance struct {
	db    *sqldb.DB
	st    *store.Store
	alice *store.Actor
	svc   *delivery.Service
	stop  func()
}

func newInstance(b *testing.B, ca *benchCA, opts ...func(*delivery.Config)) *instance {
	b.Helper()
	ctx := context.Background()
	db := storetest.Open(b, storetest.Location(b), storetest.Options{}) // production FULL on SQLite
	st := store.New(db, baseURL, nil)
	alice, _, err := st.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		b.Fatal(err)
	}
	priv, err := activitypub.ParsePrivateKeyPEM(alice.PrivateKeyPEM)
	if err != nil {
		b.Fatal(err)
	}
	// The production client (its timeouts, pool and TLS), trusting only
	// the run's CA; private addresses allowed for loopback.
	client := activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, RootCAs: ca.pool, LookupHost: lookupBenchName})
	fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
		Client: client, Signer: activitypub.Signer{KeyID: activitypub.KeyID(alice.URI), Key: priv}})
	if err != nil {
		b.Fatal(err)
	}
	resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: st})
	if err != nil {
		b.Fatal(err)
	}
	cfg := delivery.Config{
		DB: db, Store: st, Resolver: resolver, BaseURL: baseURL, AllowPrivate: true,
		Client: ca.deliveryClient(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := delivery.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	reg := outbox.NewRegistry()
	svc.Register(reg)
	w, err := outbox.NewWorker(outbox.WorkerConfig{DB: db.Write, Read: db.Read, Registry: reg, Concurrency: benchConcurrency})
	if err != nil {
		b.Fatal(err)
	}
	db.OnWrite(w.Notify)
	runCtx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { _ = svc.Run(runCtx) })
	running.Go(func() { _ = w.Run(runCtx) })
	in := &instance{db: db, st: st, alice: alice, svc: svc}
	in.stop = func() { cancel(); running.Wait(); db.Close() }
	return in
}

func (in *instance) spec(ca *benchCA) receiverSpec {
	return ca.spec(map[string]string{activitypub.KeyID(in.alice.URI): in.alice.PublicKeyPEM})
}

// spec is a receivers' process issuing its hosts' certificates from ca and
// trusting keys (SPKI PEM by key id).
func (ca *benchCA) spec(keys map[string]string) receiverSpec {
	return receiverSpec{CACert: string(ca.certPEM), CAKey: string(ca.keyPEM), Keys: keys}
}

// deliveryClient is the client courier serve gives delivery (the
// production client with delivery's timeouts and per-host connections),
// trusting only ca; private addresses allowed for loopback.
func (ca *benchCA) deliveryClient() *http.Client {
	return activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, RootCAs: ca.pool,
		Timeout: delivery.DefaultTimeout, DialTimeout: delivery.DefaultDialTimeout,
		TLSHandshakeTimeout: delivery.DefaultDialTimeout, ResponseHeaderTimeout: delivery.DefaultResponseHeaderTimeout,
		MaxConnsPerHost: delivery.DefaultPerHostConcurrency, LookupHost: lookupBenchName})
}

// followers adds perHost followers of alice on every host, sharing the
// host's inbox unless personal.
func (in *instance) followers(b *testing.B, hosts []string, perHost int, personal bool) {
	b.Helper()
	ctx := context.Background()
	err := in.db.Tx(ctx, func(tx *sql.Tx) error {
		for _, h := range hosts {
			for j := range perHost {
				uri := fmt.Sprintf("%s/users/f%d", h, j)
				f := store.Follower{ActorID: in.alice.ID, URI: uri, Inbox: uri + "/inbox"}
				if !personal {
					f.SharedInbox = h + "/inbox"
				}
				if _, err := in.st.AddFollowerTx(ctx, tx, f); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// fanoutRun posts benchNotes notes and returns the healthy hosts'
// deliveries per second; hung and slow are the shares of hosts that never
// answer and that answer after 10 s.
func fanoutRun(b *testing.B, ca *benchCA, mode string, hung, slow float64, opts ...func(*delivery.Config)) runResult {
	b.Helper()
	in := newInstance(b, ca, opts...)
	defer in.stop()
	spec := in.spec(ca)
	spec.Hosts, spec.Mode, spec.Hung, spec.Slow = benchHosts, mode, hung, slow
	rc := startReceivers(b, spec)
	defer rc.stop()
	in.followers(b, rc.hosts, benchPerHost, false)
	healthyHosts := benchHosts - int(float64(benchHosts)*hung) - int(float64(benchHosts)*slow)
	want := int64(healthyHosts * benchNotes)
	var last receiverStats
	series := newSeries(fmt.Sprintf("fanout-%s-hung%02.0f-slow%02.0f", mode, hung*100, slow*100))
	defer series.write(b)
	r, signCPU := measureProbed(b, func() int64 {
		series.start()
		for n := range benchNotes {
			if _, _, err := notetest.Create(context.Background(), in.st, in.alice, notetest.Input{
				Content: fmt.Sprintf("<p>note %d</p>", n),
				To:      []string{activitypub.Public}, CC: []string{in.st.URIs().Followers("alice")}}); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(5 * time.Minute)
		for {
			last = rc.stats(b)
			series.add(last)
			if last.Healthy >= want {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: only %d of %d healthy deliveries after 5 min (%d rejected)", mode, last.Healthy, want, last.Rejected)
			}
			// Each look is a request to the receivers' process, on
			// courier's CPU clock: every 25 ms it is a few tenths of a
			// percent of the run's CPU, and the run's end is read within
			// 25 ms of a run of 12 s or more.
			time.Sleep(25 * time.Millisecond)
		}
		return want
	})
	if last.Rejected != 0 {
		b.Fatalf("%s: %d requests failed verification", mode, last.Rejected)
	}
	if slow > 0 {
		// The slow hosts are served too, at their pace.
		wantSlow := int64(int(float64(benchHosts)*slow) * benchNotes)
		deadline := time.Now().Add(3 * time.Minute)
		for last.Slow < wantSlow && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			last = rc.stats(b)
			series.add(last)
		}
		if last.Slow < wantSlow {
			b.Fatalf("%s: slow hosts got %d of %d deliveries", mode, last.Slow, wantSlow)
		}
	}
	return runResult{rate: r, stats: last, signCPU: signCPU}
}

// acceptRun fans one note out to benchBacklog personal inboxes, and once
// those deliveries are pending enqueues the Accept of a Follow by another
// local actor to one remote actor, and returns how long the Accept took to
// reach its inbox.
func acceptRun(b *testing.B, ca *benchCA, opts ...func(*delivery.Config)) time.Duration {
	b.Helper()
	ctx := context.Background()
	in := newInstance(b, ca, opts...)
	defer in.stop()
	spec := in.spec(ca)
	spec.Hosts, spec.Mode = benchHosts, "tls-http1"
	bob, _, err := in.st.CreateActor(ctx, store.NewActor{Name: "bob"})
	if err != nil {
		b.Fatal(err)
	}
	spec.Keys[activitypub.KeyID(bob.URI)] = bob.PublicKeyPEM
	rc := startReceivers(b, spec)
	defer rc.stop()
	in.followers(b, rc.hosts, benchBacklog/benchHosts, true)
	q := outbox.NewQueue(in.db.Write, outbox.QueueOptions{Read: in.db.Read})
	if _, _, err := notetest.Create(ctx, in.st, in.alice, notetest.Input{Content: "<p>to everyone</p>",
		To: []string{activitypub.Public}, CC: []string{in.st.URIs().Followers("alice")}}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := q.Count(ctx, outbox.Filter{Type: delivery.EventPost, Status: outbox.StatusPending}, benchBacklog)
		if err != nil {
			b.Fatal(err)
		}
		if n >= benchBacklog*9/10 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the fan-out enqueued %d deliveries in 3 min", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	follower := rc.hosts[len(rc.hosts)/2] + "/users/follower"
	start := time.Now()
	err = in.db.Tx(ctx, func(tx *sql.Tx) error {
		_, _, err := in.st.EnqueueEventActivityTx(ctx, tx, uuid.NewString(), start, bob, "Accept",
			store.FollowObject(follower+"/follows/1", follower, bob.URI), []string{follower}, nil)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	for {
		st := rc.stats(b)
		if st.AcceptAt != 0 {
			return time.Unix(0, st.AcceptAt).Sub(start)
		}
		if time.Since(start) > 3*time.Minute {
			b.Fatal("the Accept did not arrive in 3 min")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkFanoutHung runs the three fan-outs of BenchmarkFanout that
// docs/benchmarks.md plots, over TLS with HTTP/2 offered on hosts reached
// by name (faultMode): all healthy, with 20% of
// the hosts hung, all healthy again; it reports the hung run's healthy
// deliveries/s over the mean of the two around it. With
// COURIER_BENCH_SERIES=DIR each run writes its deliveries over time to DIR
// (see fanoutSeries), which `go generate ./docs` plots:
//
//	COURIER_BENCH_SERIES=docs/bench go test ./delivery/ -run '^$' -bench 'BenchmarkFanoutHung' -benchtime 1x -timeout 20m
func BenchmarkFanoutHung(b *testing.B) {
	ca := newBenchCA(b)
	for b.Loop() {
		before := fanoutRun(b, ca, faultMode, 0, 0)
		hung := fanoutRun(b, ca, faultMode, 0.2, 0)
		after := fanoutRun(b, ca, faultMode, 0, 0)
		ref := around(before, after)
		b.ReportMetric(hung.rate.wall/ref.wall, "ratio_20%_hung_to_healthy")
		b.ReportMetric(hung.rate.wall, "hung_healthy_deliveries/s")
		b.ReportMetric(float64(hung.hungPosts()), "posts_to_hung_hosts")
		b.ReportMetric(ref.wall, "healthy_deliveries/s")
	}
}

// fanoutSeries records what the receivers counted during one fan-out run,
// each time the run looked, and with COURIER_BENCH_SERIES=DIR writes it to
// DIR/NAME-N.csv (N counts the runs of the process, so runs of one mode
// keep their order): seconds since the first note, deliveries received by
// the healthy hosts and by the slow ones, each counted once.
type fanoutSeries struct {
	dir, name string
	t0        time.Time
	rows      [][3]float64
}

var seriesRuns atomic.Int64

func newSeries(name string) *fanoutSeries {
	return &fanoutSeries{dir: os.Getenv("COURIER_BENCH_SERIES"), name: name}
}

func (s *fanoutSeries) start() { s.t0 = time.Now(); s.rows = append(s.rows[:0], [3]float64{0, 0, 0}) }

func (s *fanoutSeries) add(st receiverStats) {
	if s.dir != "" {
		s.rows = append(s.rows, [3]float64{time.Since(s.t0).Seconds(), float64(st.Healthy), float64(st.Slow)})
	}
}

func (s *fanoutSeries) write(b testing.TB) {
	if s.dir == "" {
		return
	}
	var buf strings.Builder
	buf.WriteString("seconds,healthy_deliveries,slow_deliveries\n")
	for _, r := range s.rows {
		fmt.Fprintf(&buf, "%.3f,%.0f,%.0f\n", r[0], r[1], r[2])
	}
	path := filepath.Join(s.dir, fmt.Sprintf("%s-%d.csv", s.name, seriesRuns.Add(1)))
	if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
		b.Errorf("write the series: %v", err)
	}
}

// BenchmarkFanoutOrderCost measures what the order per object costs the
// fan-out (docs/benchmarks.md rows 3, 5, 6 and 9), one sub-benchmark a
// row: each run of the row twice with the order and twice without it
// (delivery.Unordered: no order key written, no predecessor read), in ABBA
// order so that the shared machine's drift falls on both alike, reporting
// the ordered figure over the unordered one (1 is free; the goal is within
// 5%). Row 3 is deliveries per courier CPU-second over TLS with HTTP/2;
// rows 5 and 6 the healthy hosts' rate with 20% of the hosts hung or slow
// over an all-healthy run of the same setting just before it, TLS with
// HTTP/2 offered, hosts by name; row 9 the Accept behind 100,000 pending
// deliveries (unordered time over ordered, so above 1 is slower).
//
//	go test ./delivery/ -run '^$' -bench 'BenchmarkFanoutOrderCost' -benchtime 1x -timeout 60m
func BenchmarkFanoutOrderCost(b *testing.B) {
	ca := newBenchCA(b)
	off := []func(*delivery.Config){delivery.Unordered}
	pair := func(run func(opts ...func(*delivery.Config)) float64) (on, unordered float64) {
		a1 := run()
		b1 := run(off...)
		b2 := run(off...)
		a2 := run()
		return (a1 + a2) / 2, (b1 + b2) / 2
	}
	faulty := func(b *testing.B, hung, slow float64) func(opts ...func(*delivery.Config)) float64 {
		return func(opts ...func(*delivery.Config)) float64 {
			ref := fanoutRun(b, ca, faultMode, 0, 0, opts...)
			res := fanoutRun(b, ca, faultMode, hung, slow, opts...)
			return res.rate.wall / ref.rate.wall
		}
	}
	b.Run("row3", func(b *testing.B) {
		for b.Loop() {
			on, unordered := pair(func(opts ...func(*delivery.Config)) float64 {
				return fanoutRun(b, ca, "tls-http2", 0, 0, opts...).rate.cpu
			})
			b.ReportMetric(on/unordered, "ordered_to_unordered")
			b.Logf("row 3 (TLS HTTP/2, deliveries per courier CPU-second): ordered %.0f, unordered %.0f (ratio %.3f)", on, unordered, on/unordered)
		}
	})
	b.Run("row5", func(b *testing.B) {
		for b.Loop() {
			on, unordered := pair(faulty(b, 0.2, 0))
			b.ReportMetric(on/unordered, "ordered_to_unordered")
			b.Logf("row 5 (20%% hung, healthy rate over all healthy): ordered %.2f, unordered %.2f", on, unordered)
		}
	})
	b.Run("row6", func(b *testing.B) {
		for b.Loop() {
			on, unordered := pair(faulty(b, 0, 0.2))
			b.ReportMetric(on/unordered, "ordered_to_unordered")
			b.Logf("row 6 (20%% slow, healthy rate over all healthy): ordered %.2f, unordered %.2f", on, unordered)
		}
	})
	b.Run("row9", func(b *testing.B) {
		for b.Loop() {
			on, unordered := pair(func(opts ...func(*delivery.Config)) float64 {
				return acceptRun(b, ca, opts...).Seconds()
			})
			b.ReportMetric(unordered/on, "ordered_to_unordered")
			b.Logf("row 9 (an Accept behind 100,000 pending): ordered %.2f s, unordered %.2f s", on, unordered)
		}
	})
}

// BenchmarkFanoutMode runs one all-healthy fan-out of BenchmarkFanout per
// transport, as sub-benchmarks (http1, tls-http1, tls-http2), so that one
// can be run or profiled alone:
//
//	go test ./delivery/ -run '^$' -bench 'BenchmarkFanoutMode/^http1$' -benchtime 1x -timeout 20m
func BenchmarkFanoutMode(b *testing.B) {
	ca := newBenchCA(b)
	for _, mode := range []string{"http1", "tls-http1", "tls-http2"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				key, err := activitypub.GenerateKey()
				if err != nil {
					b.Fatal(err)
				}
				sign := signRate(key, time.Second)
				res := fanoutRun(b, ca, mode, 0, 0)
				sign = sign.best(signRate(key, time.Second))
				b.ReportMetric(sign.wall, "signatures/s")
				b.ReportMetric(res.rate.wall, "deliveries/s")
				b.ReportMetric(res.rate.cpu/sign.cpu, "ratio_to_signing_cpu")
				b.ReportMetric(res.rate.cpu/res.signCPU, "ratio_to_signing_cpu_same_time")
				b.ReportMetric(res.rate.wall/sign.wall, "ratio_to_signing_wall")
				b.ReportMetric(res.connsPerDelivery(), "new_conns/delivery")
				b.ReportMetric(res.resumedShare(), "resumed_share")
				b.ReportMetric(float64(res.stats.Duplicates), "duplicates")
			}
		})
	}
}
