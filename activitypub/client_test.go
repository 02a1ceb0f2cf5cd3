package activitypub

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

func TestIsGlobalAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip   string
		want bool
	}{
		{"93.184.216.34", true},
		{"1.1.1.1", true},
		{"2606:4700:4700::1111", true},
		{"127.0.0.1", false},
		{"127.8.9.10", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"172.32.0.1", true},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"100.127.255.255", false},
		{"100.128.0.1", true},
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"::", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"255.255.255.255", false},
		{"240.0.0.1", false},
		{"192.0.2.1", false},
		{"198.18.0.1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fe80::1", false},
		{"ff02::1", false},
		{"2001:db8::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"::ffff:93.184.216.34", true},
		{"64:ff9b::7f00:1", false},
		{"64:ff9b::5db8:d822", true},
		{"2002:7f00:1::1", false},
	}
	for _, tt := range tests {
		if got := IsGlobalAddr(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("IsGlobalAddr(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
}

func TestClientGuard(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.Header().Set("X-UA", r.Header.Get("User-Agent"))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	// Refused by default, detectable through *url.Error and *net.OpError.
	c := NewClient(ClientOptions{Timeout: 5 * time.Second})
	resp, err := c.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("request to 127.0.0.1 succeeded with the guard on")
	}
	if !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("got %v, want ErrPrivateAddress", err)
	}
	// A hostname resolving to loopback is refused too: the check is on the
	// dialed address, not the name.
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp, err = c.Get("http://localhost:" + port + "/")
	if err == nil {
		resp.Body.Close()
		t.Fatal("request to localhost succeeded with the guard on")
	}
	if !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("localhost: got %v, want ErrPrivateAddress", err)
	}

	// Allowed with AllowPrivate; the User-Agent is set; redirects are not followed.
	c = NewClient(ClientOptions{AllowPrivate: true, Timeout: 5 * time.Second, UserAgent: "courier-test"})
	resp, err = c.Get(srv.URL)
	if err != nil {
		t.Fatalf("AllowPrivate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-UA") != "courier-test" {
		t.Fatalf("status %d, user agent %q", resp.StatusCode, resp.Header.Get("X-UA"))
	}
	resp, err = c.Get(srv.URL + "/redirect")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/elsewhere" {
		t.Fatalf("redirect followed: status %d", resp.StatusCode)
	}
}

func TestMetadataAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"169.254.169.254", true},
		{"169.254.0.1", true},
		{"::ffff:169.254.169.254", true},
		{"::169.254.169.254", true},
		{"64:ff9b::169.254.169.254", true},
		{"fd00:ec2::254", true},
		{"100.100.100.200", true},
		{"::ffff:100.100.100.200", true},
		{"fe80::1", true},
		{"fe80::1%eth0", true},
		{"10.0.0.5", false},
		{"192.168.1.10", false},
		{"127.0.0.1", false},
		{"::1", false},
		{"::", false},
		{"fd00:ec2::253", false},
		{"100.100.100.201", false},
		{"93.184.216.34", false},
	} {
		if got := MetadataAddr(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("MetadataAddr(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
	allow := []netip.Prefix{netip.MustParsePrefix("169.254.10.0/24")}
	if !AddrAllowed(netip.MustParseAddr("::ffff:169.254.10.20"), allow) || AddrAllowed(netip.MustParseAddr("169.254.169.254"), allow) {
		t.Error("AddrAllowed does not judge by the prefix")
	}
}

// TestClientDenyMetadata: a client that allows private addresses but
// denies metadata ones (the webhooks') reaches loopback and refuses to dial
// link-local and cloud metadata addresses, in any of their forms, but
// those it allows; the refusal comes before any packet is sent.
func TestClientDenyMetadata(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c := NewClient(ClientOptions{AllowPrivate: true, DenyMetadata: true, Timeout: 5 * time.Second,
		AllowAddrs: []netip.Prefix{netip.MustParsePrefix("169.254.10.20/32")}})
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("loopback: %v", err)
	}
	resp.Body.Close()
	for _, u := range []string{"http://169.254.169.254:9/latest/meta-data/", "http://[::ffff:169.254.169.254]:9/",
		"http://[fd00:ec2::254]:9/", "http://100.100.100.200:9/", "http://[fe80::1%25lo]:9/", "http://[::169.254.169.254]:9/"} {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, ErrPrivateAddress) {
			t.Errorf("GET %s: %v, want ErrPrivateAddress", u, err)
		}
	}
	if !AddrAllowed(netip.MustParseAddr("169.254.10.20"), []netip.Prefix{netip.MustParsePrefix("169.254.10.20/32")}) {
		t.Error("an allowed address is not allowed")
	}
}

// A client with LookupHost reaches a host by a name only it resolves, with
// the request's Host the name; the guard still checks the address the name
// resolved to; a name it does not know fails as a DNS error.
func TestClientLookupHost(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Host", r.Host)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var looked []string
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		looked = append(looked, host)
		if host == "peer.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, errors.New("unknown")
	}
	c := NewClient(ClientOptions{AllowPrivate: true, Timeout: 5 * time.Second, LookupHost: lookup})
	resp, err := c.Get("http://peer.test:" + port + "/")
	if err != nil {
		t.Fatalf("by name: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Host") != "peer.test:"+port {
		t.Fatalf("status %d, Host %q", resp.StatusCode, resp.Header.Get("X-Host"))
	}
	if len(looked) != 1 || looked[0] != "peer.test" {
		t.Fatalf("looked up %q, want peer.test once", looked)
	}

	_, err = c.Get("http://other.test:" + port + "/")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || dnsErr.Name != "other.test" {
		t.Fatalf("unknown name: got %v, want a DNS error for other.test", err)
	}

	guarded := NewClient(ClientOptions{Timeout: 5 * time.Second, LookupHost: lookup})
	resp, err = guarded.Get("http://peer.test:" + port + "/")
	if err == nil {
		resp.Body.Close()
		t.Fatal("a name resolving to loopback was reached with the guard on")
	}
	if !errors.Is(err, ErrPrivateAddress) {
		t.Fatalf("guarded: got %v, want ErrPrivateAddress", err)
	}
}
