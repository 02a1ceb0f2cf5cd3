package activitypub

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a throwaway certificate authority made by a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "courier test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf issues a server certificate for ip.
func (ca *testCA) leaf(t testing.TB, serial int64, ip net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: ip.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{ip}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// hostSet is n simulated hosts, each its own server on its own loopback
// address, counting the connections they accept.
type hostSet struct {
	urls    []string
	newConn atomic.Int64
	// carrying holds the connections that carried a request (keys: the
	// accepted net.Conn): a dial the client's transport abandons during
	// its handshake, once an idle connection served the request first,
	// carries none.
	carrying sync.Map
	resumed  atomic.Int64
	h2       atomic.Int64
	posts    atomic.Int64
}

// connKey is the request context key of the connection it came on.
type connKey struct{}

// carried returns how many connections carried a request.
func (hs *hostSet) carried() int {
	n := 0
	hs.carrying.Range(func(any, any) bool { n++; return true })
	return n
}

// hostMode selects how a hostSet serves.
type hostMode int

const (
	plainHTTP1 hostMode = iota
	tlsHTTP1
	tlsHTTP2
)

func newHostSet(t *testing.T, n int, mode hostMode, ca *testCA, closeEach bool) *hostSet {
	t.Helper()
	hs := &hostSet{}
	for i := range n {
		ip := net.IPv4(127, 0, 1+byte(i/250), 1+byte(i%250))
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hs.posts.Add(1)
			if c := r.Context().Value(connKey{}); c != nil {
				hs.carrying.LoadOrStore(c, true)
			}
			if r.TLS != nil && r.TLS.DidResume {
				hs.resumed.Add(1)
			}
			if r.ProtoMajor == 2 {
				hs.h2.Add(1)
			}
			if closeEach {
				w.Header().Set("Connection", "close")
			}
			w.WriteHeader(http.StatusAccepted) // no body: the response the pool race is about
		}))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				hs.newConn.Add(1)
			}
		}
		switch mode {
		case plainHTTP1:
			srv.Start()
		case tlsHTTP1, tlsHTTP2:
			protos := []string{"http/1.1"}
			if mode == tlsHTTP2 {
				protos = []string{"h2", "http/1.1"}
				srv.EnableHTTP2 = true
			}
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, int64(i+2), ip)}, NextProtos: protos}
			srv.StartTLS()
		}
		t.Cleanup(srv.Close)
		hs.urls = append(hs.urls, srv.URL+"/inbox")
	}
	return hs
}

// patient gives o's every bound the time left before the test's deadline
// (ten minutes without one): these tests are about what the pool does, not
// how fast the machine is, and 64 TLS handshakes at once on a loaded 2-core
// machine under the race detector may take longer than the defaults.
func patient(t *testing.T, o ClientOptions) ClientOptions {
	left := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		left = time.Until(d)
	}
	o.Timeout, o.DialTimeout, o.TLSHandshakeTimeout, o.ResponseHeaderTimeout, o.IdleConnTimeout = left, left, left, left, left
	return o
}

// round POSTs once to every host, concurrently, and returns the requests
// that failed.
func (hs *hostSet) round(c *http.Client, workers int) []error {
	var mu sync.Mutex
	var errs []error
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(hs.urls) {
					return
				}
				resp, err := c.Post(hs.urls[i], ContentType, strings.NewReader(`{}`))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// Over many more hosts than net/http's default pool size, every host keeps
// its connection between two rounds of deliveries, and no POST whose
// response was written fails because of what the pool did afterwards.
func TestClientKeepsConnectionsAcrossManyHosts(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	for _, tc := range []struct {
		name string
		mode hostMode
	}{{"http1", plainHTTP1}, {"tls-http1", tlsHTTP1}, {"tls-http2", tlsHTTP2}} {
		t.Run(tc.name, func(t *testing.T) {
			const hosts = 300
			hs := newHostSet(t, hosts, tc.mode, ca, false)
			c := NewClient(patient(t, ClientOptions{AllowPrivate: true, RootCAs: ca.pool}))
			defer c.CloseIdleConnections()
			for r := range 3 {
				if errs := hs.round(c, 64); len(errs) > 0 {
					t.Fatalf("round %d: %d of %d POSTs failed, first: %v", r, len(errs), hosts, errs[0])
				}
			}
			if got := hs.carried(); got != hosts {
				t.Errorf("%d connections carried the POSTs of 3 rounds over %d hosts, want %d (one per host)", got, hosts, hosts)
			}
			if tc.mode == tlsHTTP2 {
				if got := hs.h2.Load(); got != 3*hosts {
					t.Errorf("%d of %d POSTs over HTTP/2", got, 3*hosts)
				}
			}
		})
	}
}

// A new TLS connection to a host courier talked to before resumes the
// session instead of a full handshake.
func TestClientResumesTLSSessions(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	const hosts = 20
	hs := newHostSet(t, hosts, tlsHTTP1, ca, true) // every response closes its connection
	c := NewClient(patient(t, ClientOptions{AllowPrivate: true, RootCAs: ca.pool}))
	defer c.CloseIdleConnections()
	for r := range 3 {
		if errs := hs.round(c, 8); len(errs) > 0 {
			t.Fatalf("round %d: %v", r, errs[0])
		}
	}
	if got := hs.newConn.Load(); got != 3*hosts {
		t.Fatalf("%d connections, want %d (the servers close each)", got, 3*hosts)
	}
	if got := hs.resumed.Load(); got != 2*hosts {
		t.Errorf("%d resumed handshakes, want %d (every connection after each host's first)", got, 2*hosts)
	}
}

// The client trusts only the roots it is given.
func TestClientRootCAs(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	hs := newHostSet(t, 1, tlsHTTP1, ca, false)
	other := newTestCA(t)
	c := NewClient(patient(t, ClientOptions{AllowPrivate: true, RootCAs: other.pool}))
	errs := hs.round(c, 1)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "certificate") {
		t.Fatalf("errors %v, want one certificate error", errs)
	}
}
