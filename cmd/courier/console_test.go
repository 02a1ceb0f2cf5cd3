package main

import (
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// consoleToken is the admin token of the console tests.
const consoleToken = "console-test-admin-token-0123456789abcdef"

// consoleRig is a running courier (server and worker in one process, the
// db bus) with one local actor, alice, and one remote host on loopback
// whose actor follows her. The remote inbox verifies the signature of every
// delivery with alice's key as courier publishes it, and answers with a
// status the test sets.
type consoleRig struct {
	app    *app
	public string // the public base URL
	ops    string // the operators' base URL
	alice  *store.Actor
	remote *signedInbox
}

func newConsoleRig(t *testing.T) *consoleRig {
	t.Helper()
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	addr := holdAddr(t, &cfg)
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = addr
	cfg.OpsListen = "127.0.0.1:0"
	cfg.BaseURL = "http://" + addr
	cfg.AllowPrivateAddresses = true
	cfg.AdminToken = consoleToken
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	alice, _, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	rig := &consoleRig{app: a, public: cfg.BaseURL, ops: "http://" + a.opsListener.Addr().String(), alice: alice}
	rig.remote = newSignedInbox(t, key, alice.URI)
	return rig
}

// follow has the remote actor follow alice; courier answers with an Accept
// delivered to the remote inbox.
func (r *consoleRig) follow(t *testing.T) {
	t.Helper()
	h := r.remote.host
	act := map[string]any{
		"@context": activitypub.ActivityStreams,
		"id":       h.srv.URL + "/follows/1",
		"type":     "Follow", "actor": h.actorID(), "object": r.alice.URI,
	}
	if st := h.post(t, r.public+"/inbox", act); st != http.StatusAccepted {
		t.Fatalf("follow answered %d", st)
	}
}

// deadLetterNote has the remote host follow alice (its Accept delivered),
// then refuse (400) the Create of a note alice posts to her followers, which
// is dead-lettered.
func (r *consoleRig) deadLetterNote(t *testing.T) {
	t.Helper()
	bg := context.Background()
	r.remote.status.Store(http.StatusAccepted)
	r.follow(t)
	waitFor(t, "the Accept delivered", func() bool { return len(r.remote.received("Accept")) == 1 })
	r.remote.status.Store(http.StatusBadRequest)
	if _, _, err := notetest.Create(bg, r.app.store, r.alice, notetest.Input{Content: "hello", To: []string{r.alice.URI + "/followers"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Create dead-lettered", func() bool {
		st, err := r.app.queue.Stats(bg)
		return err == nil && st["dead_lettered"]["delivery.post"] == 1
	})
	// Host health is recorded in the background.
	waitFor(t, "the host's health recorded", func() bool {
		_, err := r.app.delivery.Health().Host(bg, hostOf(r.remote.host.srv.URL))
		return err == nil
	})
}

// signedInbox is a remote host (remoteHost's actor document) whose inbox
// verifies each delivery's signature against the sender's published key
// and answers with status.
type signedInbox struct {
	host    *remoteHost
	keyURL  string
	status  atomic.Int32
	mu      sync.Mutex
	pub     crypto.PublicKey
	got     []map[string]any
	refused []error
}

func newSignedInbox(t *testing.T, key *rsa.PrivateKey, senderURI string) *signedInbox {
	t.Helper()
	s := &signedInbox{keyURL: senderURI}
	s.status.Store(http.StatusBadRequest)
	h := &remoteHost{key: key}
	s.host = h
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.serve(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			err = s.verify(r, body)
		}
		if err != nil {
			s.mu.Lock()
			s.refused = append(s.refused, err)
			s.mu.Unlock()
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		st := int(s.status.Load())
		if st < 300 {
			var act map[string]any
			if json.Unmarshal(body, &act) == nil {
				s.mu.Lock()
				s.got = append(s.got, act)
				s.mu.Unlock()
			}
		}
		w.WriteHeader(st)
	}))
	t.Cleanup(h.srv.Close)
	return s
}

// verify checks the request's signature with the sender's key, fetched
// once from courier's actor document.
func (s *signedInbox) verify(r *http.Request, body []byte) error {
	s.mu.Lock()
	pub := s.pub
	s.mu.Unlock()
	if pub == nil {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, s.keyURL, nil)
		req.Header.Set("Accept", activitypub.ContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var doc struct {
			PublicKey struct {
				PublicKeyPem string `json:"publicKeyPem"`
			} `json:"publicKey"`
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
			return err
		}
		if pub, err = activitypub.ParsePublicKeyPEM(doc.PublicKey.PublicKeyPem); err != nil {
			return err
		}
		s.mu.Lock()
		s.pub = pub
		s.mu.Unlock()
	}
	return activitypub.Verify(r, body, pub, activitypub.VerifyOptions{})
}

// received returns the verified activities of typ the inbox accepted.
func (s *signedInbox) received(typ string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, a := range s.got {
		if a["type"] == typ {
			out = append(out, a)
		}
	}
	return out
}

func (s *signedInbox) refusals() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.refused...)
}

// noRedirect is a client that shows redirects instead of following them.
func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func hostOf(u string) string { return strings.TrimPrefix(u, "http://") }

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// consoleClient is an operator's HTTP client of the console, redirects
// shown, with a cookie jar.
type consoleClient struct {
	t   *testing.T
	ops string
	c   *http.Client
}

func newConsoleClient(t *testing.T, ops string) *consoleClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consoleClient{t: t, ops: ops, c: noRedirect(jar)}
}

func (cc *consoleClient) do(method, path string, form url.Values, header map[string]string) (*http.Response, string) {
	cc.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, cc.ops+path, body)
	if err != nil {
		cc.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := cc.c.Do(req)
	if err != nil {
		cc.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// csrf reads the CSRF token from a signed-in page.
func (cc *consoleClient) csrf() string {
	cc.t.Helper()
	_, page := cc.do(http.MethodGet, "/console/hosts", nil, nil)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		cc.t.Fatalf("no CSRF token on the hosts page:\n%s", page)
	}
	return m[1]
}

// The console signs in only with the admin token, keeps a random session id
// (never the token) in an HttpOnly,
// SameSite=Strict cookie, refuses every change without the cookie, without
// the CSRF token or from another origin, asks before bulk and destructive
// actions, escapes what it shows and sends a strict CSP on every answer.
func TestConsoleGuards(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	bg := context.Background()
	rig.deadLetterNote(t)
	host := hostOf(rig.remote.host.srv.URL)
	paused := func() bool {
		h, err := rig.app.delivery.Health().Host(bg, host)
		if err != nil {
			t.Fatal(err)
		}
		return h.Paused
	}
	cc := newConsoleClient(t, rig.ops)
	checkHeaders := func(what string, resp *http.Response) {
		t.Helper()
		c := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(c, "default-src 'none'") || strings.Contains(c, "unsafe") || !strings.Contains(c, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", what, c)
		}
		if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", what, resp.Header)
		}
	}

	resp, _ := cc.do(http.MethodGet, "/console/", nil, nil)
	checkHeaders("signed out", resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("signed out, /console/ answered %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := cc.do(http.MethodPost, "/console/hosts/"+host+"/pause", url.Values{"csrf": {strings.Repeat("a", 64)}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not signed in") || paused() {
		t.Fatalf("pause without the cookie: %d %s, paused %v", resp.StatusCode, body, paused())
	}
	resp, body = cc.do(http.MethodPost, "/console/login", url.Values{"token": {"wrong-token-wrong-token-wrong-token"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "Wrong admin token") {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, _ = cc.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	ck := resp.Cookies()[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/console/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/console/", ck)
	}
	if strings.Contains(ck.Value, consoleToken) || len(ck.Value) < 40 {
		t.Fatalf("session cookie %q: want a random session id, not the admin token", ck.Value)
	}
	csrf := cc.csrf()
	// A second sign-in (another browser) is another session with its own
	// CSRF token.
	other := newConsoleClient(t, rig.ops)
	if resp, _ := other.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil); resp.StatusCode != http.StatusSeeOther ||
		len(resp.Cookies()) != 1 || resp.Cookies()[0].Value == ck.Value {
		t.Fatalf("second sign-in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if other.csrf() == csrf {
		t.Fatal("two sessions share a CSRF token")
	}

	for _, c := range []struct {
		name   string
		form   url.Values
		header map[string]string
		want   int
	}{
		{"no CSRF token", url.Values{}, nil, http.StatusForbidden},
		{"wrong CSRF token", url.Values{"csrf": {strings.Repeat("0", 64)}}, nil, http.StatusForbidden},
		{"another origin", url.Values{"csrf": {csrf}}, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"opaque origin", url.Values{"csrf": {csrf}}, map[string]string{"Origin": "null"}, http.StatusForbidden},
	} {
		resp, body := cc.do(http.MethodPost, "/console/hosts/"+host+"/pause", c.form, c.header)
		checkHeaders(c.name, resp)
		if resp.StatusCode != c.want || paused() {
			t.Errorf("pause with %s: %d %s, paused %v", c.name, resp.StatusCode, body, paused())
		}
	}
	resp, _ = cc.do(http.MethodPost, "/console/hosts/"+host+"/pause", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther || !paused() {
		t.Fatalf("pause with the CSRF token: %d, paused %v", resp.StatusCode, paused())
	}
	if _, page := cc.do(http.MethodGet, "/console/hosts", nil, nil); !strings.Contains(page, "paused: deliveries") && !strings.Contains(page, "pause "+host) {
		t.Errorf("no message after the pause:\n%s", page)
	}

	// A drain asks first, with the count, and changes nothing until
	// confirmed.
	resp, body = cc.do(http.MethodPost, "/console/hosts/"+host+"/drain", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Drain "+host+": discard its 0 pending deliveries") {
		t.Errorf("drain without confirmation: %d\n%s", resp.StatusCode, body)
	}

	// Filters: by error text, host and age; a bad age is the API's 400.
	for _, c := range []struct {
		query string
		rows  int
	}{
		{"status=dead_lettered&error=status+400", 1},
		{"status=dead_lettered&error=status+410", 0},
		{"status=dead_lettered&host=" + host, 1},
		{"status=dead_lettered&host=other.example", 0},
		{"status=dead_lettered&older_than=1h", 0},
		{"status=dead_lettered&older_than=0s", 1},
		{"status=pending", 0},
	} {
		resp, page := cc.do(http.MethodGet, "/console/events?"+c.query, nil, nil)
		if n := strings.Count(page, "<tr data-row="); resp.StatusCode != http.StatusOK || n != c.rows {
			t.Errorf("events?%s: %d, %d rows, want %d", c.query, resp.StatusCode, n, c.rows)
		}
	}
	if resp, page := cc.do(http.MethodGet, "/console/events?status=dead_lettered&older_than=soon", nil, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "older_than") {
		t.Errorf("bad older_than: %d\n%s", resp.StatusCode, page)
	}

	// Discard all matching: a count and a confirmation first.
	form := url.Values{"csrf": {csrf}, "action": {"discard"}, "status": {"dead_lettered"}, "host": {host}}
	resp, body = cc.do(http.MethodPost, "/console/events/bulk", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Discard 1 dead_lettered events matching host &#34;"+host+"&#34;?") {
		t.Fatalf("bulk discard without confirmation: %d\n%s", resp.StatusCode, body)
	}
	if st, _ := rig.app.queue.Stats(bg); st["dead_lettered"]["delivery.post"] != 1 {
		t.Fatalf("the question changed something: %v", st)
	}
	// Confirming fewer than match changes only as many.
	form.Set("confirm", "0")
	resp, _ = cc.do(http.MethodPost, "/console/events/bulk", form, nil)
	if st, _ := rig.app.queue.Stats(bg); resp.StatusCode != http.StatusSeeOther || st["dead_lettered"]["delivery.post"] != 1 {
		t.Fatalf("bulk discard confirmed for 0: %d, %v", resp.StatusCode, st)
	}
	form.Set("confirm", "1")
	resp, _ = cc.do(http.MethodPost, "/console/events/bulk", form, nil)
	if st, _ := rig.app.queue.Stats(bg); resp.StatusCode != http.StatusSeeOther || st["dead_lettered"]["delivery.post"] != 0 {
		t.Fatalf("bulk discard confirmed: %d, %v", resp.StatusCode, st)
	}
	// Retrying what is not dead-lettered is refused, with the API's message.
	resp, body = cc.do(http.MethodPost, "/console/events/bulk", url.Values{"csrf": {csrf}, "action": {"retry"}, "status": {"pending"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "is not an action on pending events") {
		t.Errorf("retry of pending events: %d\n%s", resp.StatusCode, body)
	}

	// What the console shows is escaped.
	resp, _ = cc.do(http.MethodPost, "/console/blocks", url.Values{"csrf": {csrf}, "domain": {"spam.example"}, "reason": {`<script>alert(1)</script>`}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("block: %d", resp.StatusCode)
	}
	if _, page := cc.do(http.MethodGet, "/console/blocks", nil, nil); strings.Contains(page, "<script>") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the reason is not escaped:\n%s", page)
	}
	// A bad block is the API's error, shown with its status.
	resp, body = cc.do(http.MethodPost, "/console/blocks", url.Values{"csrf": {csrf}, "domain": {"not a domain"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "want a domain name") {
		t.Errorf("bad domain: %d\n%s", resp.StatusCode, body)
	}
	// Unknown events are the API's 404.
	if resp, _ := cc.do(http.MethodGet, "/console/events/999999", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown event: %d", resp.StatusCode)
	}
	// Signing out ends the session.
	resp, _ = cc.do(http.MethodPost, "/console/logout", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := cc.do(http.MethodGet, "/console/hosts", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after sign-out the hosts page answered %d", resp.StatusCode)
	}
	// The cookie copied before the sign-out signs nobody in: the session is
	// gone on the server, for pages and for changes with its CSRF token.
	copied := newConsoleClient(t, rig.ops)
	u, _ := url.Parse(rig.ops + "/console/")
	copied.c.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/console/"}})
	if resp, page := copied.do(http.MethodGet, "/console/hosts", nil, nil); resp.StatusCode != http.StatusSeeOther ||
		resp.Header.Get("Location") != "/console/login?expired=1" || strings.Contains(page, host) {
		t.Errorf("the copied cookie after sign-out: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	copied.c.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value, Path: "/console/"}})
	if resp, body := copied.do(http.MethodPost, "/console/hosts/"+host+"/resume", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "session ended") || !paused() {
		t.Errorf("resume with the copied cookie after sign-out: %d, paused %v\n%s", resp.StatusCode, paused(), body)
	}
	// The other browser's session goes on.
	if resp, _ := other.do(http.MethodGet, "/console/hosts", nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the other session after this one signed out: %d", resp.StatusCode)
	}
}

// A stale or wrong token in the cookie signs the browser out instead of
// showing anything.
func TestConsoleWrongCookieSignsOut(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	cc := newConsoleClient(t, rig.ops)
	u, _ := url.Parse(rig.ops + "/console/")
	// The admin token itself is no session id either.
	for _, v := range []string{"not-the-admin-token-not-the-admin-token", consoleToken} {
		cc.c.Jar.SetCookies(u, []*http.Cookie{{Name: "courier_console", Value: v, Path: "/console/"}})
		resp, body := cc.do(http.MethodGet, "/console/", nil, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login?expired=1" || strings.Contains(body, "Overview") {
			t.Fatalf("cookie %q: %d %q\n%s", v, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
}

// The overview lists the processes that deliver from the database: the
// server with its db-bus worker, by its pid.
func TestConsoleOverviewListsDeliveringProcesses(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	cc := newConsoleClient(t, rig.ops)
	if resp, _ := cc.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	pid := fmt.Sprintf(`<td class="num">%d</td>`, os.Getpid())
	waitFor(t, "the server among the delivering processes", func() bool {
		resp, body := cc.do(http.MethodGet, "/console/", nil, nil)
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "Delivering processes") && strings.Contains(body, pid)
	})
}

// Without an admin token the console is off, as the admin API is.
func TestConsoleOffWithoutToken(t *testing.T) {
	t.Parallel()
	a := runApp(t, nil)
	st, body := get(t, "http://"+a.opsListener.Addr().String()+"/console/login")
	if st != http.StatusNotFound || !strings.Contains(body, "COURIER_ADMIN_TOKEN") {
		t.Fatalf("console without a token: %d %s", st, body)
	}
}

// newRelayInbox is a Mastodon-style relay on loopback: its inbox (the
// relay's URL, <host>/inbox) verifies every POST against the key of
// courier's instance actor and accepts it; its actor is the host's actor.
func newRelayInbox(t *testing.T, rig *consoleRig) *signedInbox {
	t.Helper()
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	r := newSignedInbox(t, key, rig.public+"/actor")
	r.status.Store(http.StatusAccepted)
	return r
}

// acceptRelay waits for the relay's verified Follow and answers it with an
// Accept from the relay's actor to the instance actor's inbox.
func (r *consoleRig) acceptRelay(t *testing.T, relay *signedInbox) {
	t.Helper()
	waitFor(t, "the relay's Follow", func() bool { return len(relay.received("Follow")) == 1 })
	follow := relay.received("Follow")[0]
	h := relay.host
	if st := h.post(t, r.public+"/actor/inbox", map[string]any{"@context": activitypub.ActivityStreams,
		"id": h.srv.URL + "/accepts/1", "type": "Accept", "actor": h.actorID(), "object": follow}); st != http.StatusAccepted {
		t.Fatalf("the relay's Accept answered %d", st)
	}
}

// The relays page lists the relays with their style, state and actor,
// adds one (its Follow delivered to a real loopback relay that verifies
// the signature) and removes one only after a confirmation; both changes
// need the CSRF token, and what it shows is escaped.
func TestConsoleRelays(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	bg := context.Background()
	relay := newRelayInbox(t, rig)
	relayURL := relay.host.srv.URL + "/inbox"
	stored := func() []store.Relay {
		t.Helper()
		rs, err := rig.app.store.Relays(bg)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	cc := newConsoleClient(t, rig.ops)
	if resp, _ := cc.do(http.MethodGet, "/console/relays", nil, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signed out, the relays page answered %d", resp.StatusCode)
	}
	if resp, _ := cc.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	csrf := cc.csrf()
	resp, page := cc.do(http.MethodGet, "/console/relays", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "No relay is subscribed") || !strings.Contains(page, `href="/console/relays" class="on"`) {
		t.Fatalf("empty relays page: %d\n%s", resp.StatusCode, page)
	}

	// Without the CSRF token nothing is added.
	for _, form := range []url.Values{{"url": {relayURL}}, {"url": {relayURL}, "csrf": {strings.Repeat("0", 64)}}} {
		if resp, body := cc.do(http.MethodPost, "/console/relays", form, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("add without the CSRF token: %d\n%s", resp.StatusCode, body)
		}
	}
	if rs := stored(); len(rs) != 0 {
		t.Fatalf("a refused add stored %+v", rs)
	}
	// A bad URL is the API's 400, with its message.
	if resp, body := cc.do(http.MethodPost, "/console/relays", url.Values{"csrf": {csrf}, "url": {"ftp://relay.example/inbox"}}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "want an http(s) URL") {
		t.Errorf("ftp relay: %d\n%s", resp.StatusCode, body)
	}

	// Add: pending, its Follow delivered, signed by the instance actor.
	resp, _ = cc.do(http.MethodPost, "/console/relays", url.Values{"csrf": {csrf}, "url": {relayURL}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/relays" {
		t.Fatalf("add: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, page = cc.do(http.MethodGet, "/console/relays", nil, nil)
	if !strings.Contains(page, "relay "+relayURL+" (mastodon): pending") || !strings.Contains(page, `<span class="tag pending">pending</span>`) {
		t.Fatalf("after add:\n%s", page)
	}
	if resp, body := cc.do(http.MethodPost, "/console/relays", url.Values{"csrf": {csrf}, "url": {relayURL}}, nil); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "already added") {
		t.Errorf("added twice: %d\n%s", resp.StatusCode, body)
	}
	rig.acceptRelay(t, relay)
	if err := relay.refusals(); err != nil {
		t.Fatalf("the relay refused a signature: %v", err)
	}
	waitFor(t, "the relay accepted", func() bool {
		rs := stored()
		return len(rs) == 1 && rs[0].State == store.StateAccepted
	})
	_, page = cc.do(http.MethodGet, "/console/relays", nil, nil)
	if !strings.Contains(page, `<span class="tag accepted">accepted</span>`) || !strings.Contains(page, "<td>"+relay.host.actorID()+"</td>") {
		t.Fatalf("after the Accept:\n%s", page)
	}

	// A hostile URL is shown escaped, in the list and in the message.
	hostile := `https://relay.invalid/inbox?a="><script>alert(1)</script>`
	resp, _ = cc.do(http.MethodPost, "/console/relays", url.Values{"csrf": {csrf}, "url": {hostile}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("add hostile: %d", resp.StatusCode)
	}
	_, page = cc.do(http.MethodGet, "/console/relays", nil, nil)
	if strings.Contains(page, "<script>") || strings.Count(page, "&lt;script&gt;alert(1)&lt;/script&gt;") < 3 {
		t.Errorf("the hostile URL is not escaped:\n%s", page)
	}

	// Remove: without the CSRF token refused; without confirm (or with
	// another relay's) a question; confirmed, removed and its Undo sent.
	if resp, _ := cc.do(http.MethodPost, "/console/relays/remove", url.Values{"url": {relayURL}}, nil); resp.StatusCode != http.StatusForbidden || len(stored()) != 2 {
		t.Errorf("remove without the CSRF token: %d, %d relays", resp.StatusCode, len(stored()))
	}
	for _, confirm := range []string{"", hostile} {
		resp, body := cc.do(http.MethodPost, "/console/relays/remove", url.Values{"csrf": {csrf}, "url": {relayURL}, "confirm": {confirm}}, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Remove relay "+relayURL+"?") || !strings.Contains(body, `name="confirm" value="`+relayURL+`"`) {
			t.Errorf("remove with confirm %q: %d\n%s", confirm, resp.StatusCode, body)
		}
		if n := len(stored()); n != 2 {
			t.Fatalf("the question removed a relay: %d left", n)
		}
	}
	resp, _ = cc.do(http.MethodPost, "/console/relays/remove", url.Values{"csrf": {csrf}, "url": {relayURL}, "confirm": {relayURL}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove confirmed: %d", resp.StatusCode)
	}
	if rs := stored(); len(rs) != 1 || rs[0].URL == relayURL {
		t.Fatalf("after remove: %+v", rs)
	}
	if _, page = cc.do(http.MethodGet, "/console/relays", nil, nil); !strings.Contains(page, "relay "+relayURL+" removed; Undo sent") || strings.Contains(page, `data-relay="`+relayURL+`"`) {
		t.Errorf("after remove:\n%s", page)
	}
	waitFor(t, "the relay's Undo", func() bool { return len(relay.received("Undo")) == 1 })
	if undo, _ := relay.received("Undo")[0]["object"].(map[string]any); undo["id"] != relay.received("Follow")[0]["id"] {
		t.Errorf("Undo of %v, want the Follow", undo)
	}
	if err := relay.refusals(); err != nil {
		t.Fatalf("the relay refused a signature: %v", err)
	}
	// Removing without a URL is refused before any question.
	if resp, body := cc.do(http.MethodPost, "/console/relays/remove", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "url is required") {
		t.Errorf("remove without a URL: %d\n%s", resp.StatusCode, body)
	}
	// Removing an unknown relay is the API's 404.
	if resp, body := cc.do(http.MethodPost, "/console/relays/remove", url.Values{"csrf": {csrf}, "url": {relayURL}, "confirm": {relayURL}}, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no relay") {
		t.Errorf("remove unknown: %d\n%s", resp.StatusCode, body)
	}
}
