package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// do sends method to rawURL with Host host ("" keeps the URL's) and
// returns the status, the headers and the body.
func do(t *testing.T, method, rawURL, host string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// jsonError returns the "error" of a JSON error body, or fails.
func jsonError(t *testing.T, what, ct, body string) string {
	t.Helper()
	var m struct {
		Error string `json:"error"`
	}
	if !strings.HasPrefix(ct, "application/json") || json.Unmarshal([]byte(body), &m) != nil || m.Error == "" {
		t.Fatalf("%s: %s %q, want a JSON error body", what, ct, body)
	}
	return m.Error
}

// Every error of the public listener is the JSON error body: a path no
// route serves (GET /), a method a route does not serve (405 with Allow and
// a body), on the ActivityPub routes and the inbox alike.
func TestPublicListenerErrorsAreJSON(t *testing.T) {
	t.Parallel()
	a := runApp(t, nil)
	public := "http://" + a.listener.Addr().String()
	for _, c := range []struct {
		method, path string
		want         int
		allow        string
	}{
		{http.MethodGet, "/", http.StatusNotFound, ""},
		{http.MethodGet, "/nothing/here", http.StatusNotFound, ""},
		{http.MethodPost, "/", http.StatusNotFound, ""},
		{http.MethodDelete, "/.well-known/nodeinfo", http.StatusMethodNotAllowed, "GET"},
		{http.MethodGet, "/inbox", http.StatusMethodNotAllowed, "POST"},
		{http.MethodPut, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
	} {
		st, h, body := do(t, c.method, public+c.path, "")
		what := c.method + " " + c.path
		if st != c.want {
			t.Errorf("%s: %d %q, want %d", what, st, body, c.want)
			continue
		}
		jsonError(t, what, h.Get("Content-Type"), body)
		if c.allow != "" && !strings.Contains(h.Get("Allow"), c.allow) {
			t.Errorf("%s: Allow %q, want it to list %s", what, h.Get("Allow"), c.allow)
		}
	}
	ops := "http://" + a.opsListener.Addr().String()
	st, h, body := do(t, http.MethodGet, ops+"/nothing", "")
	if st != http.StatusNotFound {
		t.Fatalf("ops GET /nothing: %d", st)
	}
	jsonError(t, "ops GET /nothing", h.Get("Content-Type"), body)
}

// The operators' listener answers only Hosts that name it: its address,
// localhost and loopback, and the names of --ops-hosts; any other Host (a
// page whose name was rebound to this address) is 421 with a JSON body
// on every route, the console's sign-in included.
func TestOpsListenerChecksHost(t *testing.T) {
	t.Parallel()
	a, logs := startApp(t, func(c *Config) {
		c.AdminToken = "6c1f0e9b57a24d83b2e47f19a0c5d836e1b9"
		c.OpsHosts = "courier-ops.internal"
	})
	ops := "http://" + a.opsListener.Addr().String()
	_, port, _ := net.SplitHostPort(a.opsListener.Addr().String())
	paths := []string{"/metrics", "/readyz", "/healthz", "/admin/stats", "/console/", "/console/sign-in"}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:" + port, "localhost.attacker.example", "10.1.2.3:" + port, "[2001:db8::1]:" + port} {
		for _, p := range paths {
			st, h, body := do(t, http.MethodGet, ops+p, host)
			if st != http.StatusMisdirectedRequest {
				t.Errorf("Host %q, GET %s: %d, want 421", host, p, st)
				continue
			}
			jsonError(t, "Host "+host+" "+p, h.Get("Content-Type"), body)
		}
	}
	// Refusals are logged, a line a minute at most.
	if n := strings.Count(logs.String(), "ops: request refused: its Host does not name this listener"); n != 1 {
		t.Errorf("%d log lines of refusals, want 1:\n%s", n, logs.String())
	}
	// Sign-in with Origin = the rebound Host is refused before the console.
	form := url.Values{"token": {"6c1f0e9b57a24d83b2e47f19a0c5d836e1b9"}}
	req, _ := http.NewRequest(http.MethodPost, ops+"/console/sign-in", strings.NewReader(form.Encode()))
	req.Host = "rebind.attacker.example:" + port
	req.Header.Set("Origin", "http://rebind.attacker.example:"+port)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMisdirectedRequest || len(res.Cookies()) != 0 {
		t.Errorf("sign-in under a rebound Host: %d, cookies %v; want 421 and none", res.StatusCode, res.Cookies())
	}
	for _, host := range []string{"", "localhost:" + port, "LOCALHOST", "ops.localhost:" + port, "127.0.0.1:" + port, "127.9.9.9:" + port, "[::1]:" + port, "courier-ops.internal:" + port, "Courier-Ops.Internal."} {
		st, _, body := do(t, http.MethodGet, ops+"/metrics", host)
		if st != http.StatusOK || !strings.Contains(body, "courier_build_info") {
			t.Errorf("Host %q, GET /metrics: %d, want 200", host, st)
		}
	}
}

// The check itself, for listen addresses the test cannot bind.
func TestOpsHostsAllowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		listen, extra, host string
		want                bool
	}{
		{"10.0.0.5:9464", "", "10.0.0.5:9464", true},
		{"10.0.0.5:9464", "", "10.0.0.6:9464", false},
		{"ops.internal:9464", "", "ops.internal:9464", true},
		{"ops.internal:9464", "", "other.internal:9464", false},
		{"0.0.0.0:9464", "server,worker", "server:9464", true},
		{"0.0.0.0:9464", "server,worker", "worker", true},
		{"0.0.0.0:9464", "server,worker", "rebind.example", false},
		{"[::]:9464", "", "127.0.0.1:9464", true},
		{":9464", "", "[::ffff:127.0.0.1]:9464", true},
		{"127.0.0.1:9464", "", "", false},
		{"127.0.0.1:9464", "", "evil.example:80@127.0.0.1", false},
	} {
		if got := newOpsHosts(c.listen, c.extra, nil).allowed(c.host); got != c.want {
			t.Errorf("listen %s, extra %q: Host %q allowed %v, want %v", c.listen, c.extra, c.host, got, c.want)
		}
	}
}
