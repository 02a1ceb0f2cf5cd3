package main

import (
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
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
	addr := freeAddr(t)
	cfg := defaultConfig()
	cfg.DB = filepath.Join(t.TempDir(), "courier.db")
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
