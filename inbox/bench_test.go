package inbox_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/metrics"
)

// benchSenders is how many remote actors sign the benchmark's requests.
const benchSenders = 8

// benchConns is how many keep-alive connections post at once, standing
// for the many remote servers that deliver to a busy inbox. Each waits for
// its answer before its next request, as a delivery worker does. Loopback
// has no network delay to hide, so it takes this many for both sides to
// stay busy: the processors verifying and parsing, the writer committing
// groups that carry tens of requests per fsync.
const benchConns = 256

// BenchmarkAccept measures signed inbound activities accepted per second
// over loopback HTTP with a warm key cache (every request verified, recorded
// and its event enqueued on a FULL-synchronous SQLite file), and, in the
// same run, the machine's RSA-2048 verifications per second on as many
// goroutines as GOMAXPROCS. Each request costs at least one verification,
// so their ratio is the share of the machine's signature-checking capacity
// the inbox delivers.
//
// The client is kept out of the way of the server: requests are signed and
// serialized before the timer starts (signing costs far more than
// verifying), and a client process (this test binary again, see
// TestBenchClient) writes them as they are onto benchConns keep-alive
// connections and reads the answers; the server parses every request in
// full. The client shares the machine's cores with the server, so ratio,
// the wall-clock figure, is a lower bound: accepted/s over rsa_verify/s.
//
// The machine is shared, so wall-clock rates move with the load of other
// processes. cpu_ratio is the load-independent form of the same figure:
// the CPU time of one RSA verification over the CPU time the server
// process spent per accepted request (its handlers, the HTTP server,
// SQLite, the runtime; not the client, which runs in its own process and
// is reported apart as client_cpu_µs/req), both measured in the run. Run
// it with a fixed count, e.g.
//
//	go test ./inbox/ -run '^$' -bench BenchmarkAccept -benchtime 3000x
func BenchmarkAccept(b *testing.B) { benchAccept(b, false) }

// BenchmarkAcceptProof is BenchmarkAccept with every Create carrying an
// FEP-8b32 eddsa-jcs-2022 proof by its actor's Ed25519 key, which the inbox
// verifies beside the HTTP signature (the ratio's denominator stays the RSA
// verifications):
//
//	go test ./inbox/ -run '^$' -bench 'BenchmarkAccept(Proof)?$' -benchtime 3000x
func BenchmarkAcceptProof(b *testing.B) { benchAccept(b, true) }

func benchAccept(b *testing.B, proof bool) {
	tb := setup(b, options{sync: "FULL", noWorker: true})
	var eds []ed25519.PrivateKey
	for i := range benchSenders {
		tb.remote.add(fmt.Sprintf("s%d", i), key(b, keyRemote))
		if proof {
			eds = append(eds, tb.remote.addEd(b, fmt.Sprintf("s%d", i)))
		}
	}
	addr := strings.TrimPrefix(tb.base, "http://")

	// The client warms the key cache (one fetch per sender) and its
	// connections with the first batch, then waits for the word to post
	// the measured one.
	warm := signRequests(b, tb, 2*benchSenders, eds...)
	wire := signRequests(b, tb, b.N, eds...)
	c := startBenchClient(b, addr, warm, wire)
	runMeasured(b, c, func() {
		if got := tb.result(b, metrics.InboxAccepted); got != b.N+2*benchSenders {
			b.Fatalf("%d accepted, want %d", got, b.N+2*benchSenders)
		}
	})
}

// BenchmarkAcceptCeiling measures what no storage design can beat on this
// machine: the requests of BenchmarkAccept, posted by the same client
// process, answered 202 by a server that does only what every inbox must
// before it stores anything. It checks the content type, reads the body,
// parses the Signature header and the activity, takes the key from a
// map filled beforehand (a warm cache without expiry) and verifies the
// signature with activitypub.VerifySignature (go-fed/httpsig), then
// answers. It stores nothing and skips the inbox's checks of domains, origin and blocks,
// so its ratio is an upper bound of BenchmarkAccept's: the share of it
// that storing costs is the difference. Run it beside BenchmarkAccept:
//
//	go test ./inbox/ -run '^$' -bench 'BenchmarkAccept' -benchtime 3000x
func BenchmarkAcceptCeiling(b *testing.B) {
	tb := setup(b, options{sync: "FULL", noWorker: true})
	keys := make(map[string]*rsa.PublicKey, benchSenders)
	for i := range benchSenders {
		name := fmt.Sprintf("s%d", i)
		tb.remote.add(name, key(b, keyRemote))
		keys[tb.remote.keyID(name)] = &key(b, keyRemote).PublicKey
	}
	var accepted atomic.Int64
	verify := func(w http.ResponseWriter, r *http.Request) {
		fail := func(status int, err error) {
			b.Error(err)
			http.Error(w, err.Error(), status)
		}
		if !activitypub.IsActivityPubContentType(r.Header.Get("Content-Type")) {
			fail(http.StatusUnsupportedMediaType, errors.New("content type"))
			return
		}
		if r.ContentLength < 0 || r.ContentLength > inbox.DefaultMaxBody {
			fail(http.StatusRequestEntityTooLarge, fmt.Errorf("Content-Length %d", r.ContentLength))
			return
		}
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		sig, err := activitypub.RequestSignature(r)
		if err != nil {
			fail(http.StatusUnauthorized, err)
			return
		}
		if _, err := activitypub.ParseActivity(body); err != nil {
			fail(http.StatusBadRequest, err)
			return
		}
		pub, ok := keys[sig.KeyID]
		if !ok {
			fail(http.StatusUnauthorized, fmt.Errorf("unknown key %s", sig.KeyID))
			return
		}
		if err := activitypub.VerifySignature(r, sig, body, pub, activitypub.VerifyOptions{}); err != nil {
			fail(http.StatusUnauthorized, err)
			return
		}
		accepted.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}
	r := mux.NewRouter()
	r.HandleFunc("/inbox", verify).Methods(http.MethodPost)
	srv := httptest.NewServer(r)
	b.Cleanup(srv.Close)

	warm := signRequests(b, tb, 2*benchSenders)
	wire := signRequests(b, tb, b.N)
	c := startBenchClient(b, srv.Listener.Addr().String(), warm, wire)
	runMeasured(b, c, func() {
		if got := accepted.Load(); got != int64(b.N+2*benchSenders) {
			b.Fatalf("%d accepted, want %d", got, b.N+2*benchSenders)
		}
	})
}

// runMeasured lets c post its measured batch of b.N requests, runs check,
// and reports the rates of BenchmarkAccept: accepted/s, rsa_verify/s and
// their ratio, cpu_ratio, the server's and the client's CPU per request.
func runMeasured(b *testing.B, c *benchClient, check func()) {
	b.Helper()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	clientCPU := c.post(b)
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	b.StopTimer()
	check()
	accepted := float64(b.N) / elapsed.Seconds()
	verifies, verifyCPU := rsaVerifyRate(b, key(b, keyRemote))
	b.ReportMetric(accepted, "accepted/s")
	b.ReportMetric(verifies, "rsa_verify/s")
	b.ReportMetric(accepted/verifies, "ratio")
	if cpu > 0 && verifyCPU > 0 {
		b.ReportMetric(float64(verifyCPU)/(float64(cpu)/float64(b.N)), "cpu_ratio")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_µs/accept")
	}
	if clientCPU > 0 {
		b.ReportMetric(float64(clientCPU.Microseconds())/float64(b.N), "client_cpu_µs/req")
	}
}

// The client process: TestBenchClient, run by BenchmarkAccept with these
// variables set, posts the requests of the file benchEnvFile to
// benchEnvAddr. It talks to the benchmark over its standard streams: it
// posts the file's first batch (the warm-up), writes benchReady, waits for
// a line on its input, posts the second batch and writes benchDone and
// the CPU time it used for it in nanoseconds.
const (
	benchEnvAddr = "INBOX_BENCH_ADDR"
	benchEnvFile = "INBOX_BENCH_FILE"
	benchReady   = "bench-client: ready"
	benchDone    = "bench-client: done"
	// benchClientTimeout bounds the whole client process.
	benchClientTimeout = 10 * time.Minute
)

// benchClient is the running client process.
type benchClient struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	lines []string // what else the process wrote, for failures
}

// startBenchClient starts the client process and waits until it has
// posted warm and dialled its connections.
func startBenchClient(b *testing.B, addr string, warm, wire [][]byte) *benchClient {
	b.Helper()
	file := filepath.Join(b.TempDir(), "requests")
	if err := writeBatches(file, warm, wire); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchClientTimeout)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBenchClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), benchEnvAddr+"="+addr, benchEnvFile+"="+file)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
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
	c := &benchClient{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait() // ends at once after benchDone; else the timeout kills it
		cancel()
	})
	c.await(b, benchReady)
	return c
}

// post lets the client post its measured batch, waits until every request
// was answered 202, and returns the client's CPU time for the batch.
func (c *benchClient) post(b *testing.B) time.Duration {
	b.Helper()
	if _, err := io.WriteString(c.in, "go\n"); err != nil {
		b.Fatal(err)
	}
	line := c.await(b, benchDone)
	ns, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, benchDone)), 10, 64)
	if err != nil {
		b.Fatalf("client: %q: %v", line, err)
	}
	return time.Duration(ns)
}

// await reads the client's output up to the line starting with want.
func (c *benchClient) await(b *testing.B, want string) string {
	b.Helper()
	for c.out.Scan() {
		line := c.out.Text()
		if strings.HasPrefix(line, want) {
			return line
		}
		c.lines = append(c.lines, line)
	}
	b.Fatalf("client ended before %q (%v):\n%s", want, c.out.Err(), strings.Join(c.lines, "\n"))
	return ""
}

// TestBenchClient is BenchmarkAccept's client process; run directly it
// does nothing.
func TestBenchClient(t *testing.T) {
	addr, file := os.Getenv(benchEnvAddr), os.Getenv(benchEnvFile)
	if addr == "" || file == "" {
		t.Skip("the client process of BenchmarkAccept")
	}
	batches, err := readBatches(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) != 2 {
		t.Fatalf("%d batches, want 2", len(batches))
	}
	c := dialClients(t, addr, benchConns)
	c.post(t, batches[0])
	fmt.Println(benchReady)
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cpu0 := processCPU()
	c.post(t, batches[1])
	fmt.Println(benchDone, int64(processCPU()-cpu0))
}

// writeBatches writes batches of requests to file: for each batch its
// count, then each request's length and bytes (uvarints).
func writeBatches(file string, batches ...[][]byte) error {
	var buf []byte
	for _, batch := range batches {
		buf = binary.AppendUvarint(buf, uint64(len(batch)))
		for _, r := range batch {
			buf = binary.AppendUvarint(buf, uint64(len(r)))
			buf = append(buf, r...)
		}
	}
	return os.WriteFile(file, buf, 0o600)
}

// readBatches reads what writeBatches wrote.
func readBatches(file string) ([][][]byte, error) {
	buf, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	next := func() (uint64, error) {
		v, n := binary.Uvarint(buf)
		if n <= 0 || v > uint64(len(buf)) {
			return 0, errors.New("bench: truncated request file")
		}
		buf = buf[n:]
		return v, nil
	}
	var batches [][][]byte
	for len(buf) > 0 {
		n, err := next()
		if err != nil {
			return nil, err
		}
		batch := make([][]byte, 0, n)
		for range n {
			l, err := next()
			if err != nil {
				return nil, err
			}
			if l > uint64(len(buf)) {
				return nil, errors.New("bench: truncated request file")
			}
			batch = append(batch, buf[:l:l])
			buf = buf[l:]
		}
		batches = append(batches, batch)
	}
	return batches, nil
}

// signRequests returns n Creates of notes by the benchmark's senders,
// signed, each serialized as an HTTP/1.1 request to the shared inbox. With
// eds (sender i's Ed25519 key), each Create carries its sender's proof.
func signRequests(b *testing.B, tb *testBundle, n int, eds ...ed25519.PrivateKey) [][]byte {
	b.Helper()
	wire := make([][]byte, n)
	procs := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range procs {
		wg.Go(func() {
			for i := w; i < n; i += procs {
				name := fmt.Sprintf("s%d", i%benchSenders)
				actor := tb.remote.actor(name)
				id := tb.id("create")
				create := activity(id, "Create", actor, note(id+"/note", actor, nil))
				create["cc"] = []string{tb.base + "/users/alice"} // concerns a local actor: stored
				body := mustJSON(b, create)
				if eds != nil {
					create["@context"] = activitypub.WithDataIntegrity(nil)
					var err error
					if body, err = activitypub.AddProof(mustJSON(b, create), activitypub.Ed25519KeyID(actor),
						eds[i%benchSenders], time.Now()); err != nil {
						b.Error(err)
						return
					}
				}
				var buf bytes.Buffer
				if err := tb.request(b, "/inbox", body, tb.as(b, name)).Write(&buf); err != nil {
					b.Error(err)
					return
				}
				wire[i] = buf.Bytes()
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return wire
}

// clients are keep-alive HTTP/1.1 connections to the server.
type clients struct {
	conns []*clientConn
}

type clientConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialClients(b testing.TB, addr string, n int) *clients {
	b.Helper()
	cs := &clients{}
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		cs.conns = append(cs.conns, &clientConn{c: c, br: bufio.NewReader(c)})
	}
	b.Cleanup(cs.close)
	return cs
}

func (cs *clients) close() {
	for _, c := range cs.conns {
		c.c.Close()
	}
}

// post sends every request once, spread over the connections, and
// requires each to be answered 202.
func (cs *clients) post(b testing.TB, wire [][]byte) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range cs.conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(wire) {
					return
				}
				if err := c.c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
					b.Error(err)
					return
				}
				if _, err := c.c.Write(wire[i]); err != nil {
					b.Error(err)
					return
				}
				status, err := readResponse(c.br)
				if err != nil {
					b.Error(err)
					return
				}
				if status != http.StatusAccepted {
					b.Errorf("status %d", status)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// readResponse reads one HTTP/1.1 response from br and returns its status.
// It reads no more than the benchmark needs: the status code, and the
// Content-Length of the body it skips.
func readResponse(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, fmt.Errorf("status line: %w", err)
	}
	proto, rest, _ := strings.Cut(string(line), " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(strings.TrimSpace(code))
	if proto != "HTTP/1.1" || err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, fmt.Errorf("header: %w", err)
		}
		h := strings.TrimSpace(string(line))
		if h == "" {
			break
		}
		if name, value, ok := strings.Cut(h, ":"); ok && strings.EqualFold(name, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil || length < 0 {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		}
	}
	if _, err := br.Discard(length); err != nil {
		return 0, fmt.Errorf("body: %w", err)
	}
	return status, nil
}

// rsaVerifyRate measures RSA-2048 PKCS#1 v1.5 SHA-256 verifications per
// second on GOMAXPROCS goroutines for about half a second, and the process
// CPU time one verification took (0 where the platform does not tell).
func rsaVerifyRate(b *testing.B, k *rsa.PrivateKey) (float64, time.Duration) {
	b.Helper()
	sum := sha256.Sum256([]byte("(request-target): post /inbox"))
	sig, err := rsa.SignPKCS1v15(nil, k, crypto.SHA256, sum[:])
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	deadline := time.Now().Add(500 * time.Millisecond)
	cpu0 := processCPU()
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
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	return float64(n.Load()) / elapsed.Seconds(), cpu / time.Duration(max(n.Load(), 1))
}
