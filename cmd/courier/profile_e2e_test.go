package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// movePeer is a fediverse server on loopback with several actors (each
// with a key and an optional alsoKnownAs), whose inboxes record what they
// receive once its signature verifies with the local actor's key.
type movePeer struct {
	srv  *httptest.Server
	keys map[string]*rsa.PrivateKey
	aka  map[string][]string

	mu       sync.Mutex
	pub      crypto.PublicKey
	received []map[string]any
	badSigs  int
}

func (p *movePeer) actor(name string) string { return p.srv.URL + "/users/" + name }

func (p *movePeer) serve(w http.ResponseWriter, r *http.Request) {
	name, isActor := strings.CutPrefix(r.URL.Path, "/users/")
	switch {
	case r.Method == http.MethodGet && isActor && p.keys[name] != nil:
		pem, _ := activitypub.EncodePublicKeyPEM(&p.keys[name].PublicKey)
		id := p.actor(name)
		doc := map[string]any{
			"@context": []string{activitypub.ActivityStreams, activitypub.SecurityContext},
			"id":       id, "type": "Person", "preferredUsername": name,
			"inbox": id + "/inbox", "outbox": id + "/outbox", "followers": id + "/followers",
			"endpoints": map[string]string{"sharedInbox": p.srv.URL + "/inbox"},
			"publicKey": map[string]string{"id": id + "#main-key", "owner": id, "publicKeyPem": pem},
		}
		if aka := p.aka[name]; aka != nil {
			doc["alsoKnownAs"] = aka
		}
		w.Header().Set("Content-Type", activitypub.ContentType)
		_ = json.NewEncoder(w).Encode(doc)
	case r.Method == http.MethodPost:
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		p.mu.Lock()
		defer p.mu.Unlock()
		var act map[string]any
		if p.pub == nil || activitypub.Verify(r, body, p.pub, activitypub.VerifyOptions{}) != nil || json.Unmarshal(body, &act) != nil {
			p.badSigs++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		p.received = append(p.received, act)
		w.WriteHeader(http.StatusAccepted)
	default:
		http.NotFound(w, r)
	}
}

// find returns the received activities for which match holds.
func (p *movePeer) find(match func(map[string]any) bool) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, a := range p.received {
		if match(a) {
			out = append(out, a)
		}
	}
	return out
}

// post sends act signed by the peer's actor name to url.
func (p *movePeer) post(t *testing.T, name, url string, act map[string]any) int {
	t.Helper()
	body, _ := json.Marshal(act)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, p.actor(name)+"#main-key", p.keys[name], time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestProfilePinsAndMoveOverHTTP runs the serve process (server and
// worker) with a peer on loopback: the peer's fan follows alice; alice's
// profile Update (icon, fields, alsoKnownAs) and her pin (Add to featured)
// reach it signed by her; alice follows the peer's old account, which then
// moves to its new account (whose document lists the old one): alice's
// Undo of the old Follow and her Follow of the new account reach the peer,
// signed.
func TestProfilePinsAndMoveOverHTTP(t *testing.T) {
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	p := &movePeer{keys: map[string]*rsa.PrivateKey{"fan": key, "old": key, "new": key}, aka: map[string][]string{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	defer p.srv.Close()
	p.aka["new"] = []string{p.actor("old")}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.DB = storetest.Location(t)
	cfg.Synchronous = "NORMAL"
	cfg.Listen = "127.0.0.1:0"
	cfg.OpsListen = "127.0.0.1:0"
	cfg.BaseURL = "http://" + ln.Addr().String()
	cfg.AllowPrivateAddresses = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := newApp(ctx, cfg, slog.New(slog.DiscardHandler), true)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	a.listener.Close()
	a.listener = ln // the listener the base URL names, never closed and reopened
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	base := cfg.BaseURL

	alice, token, err := a.store.CreateActor(ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := activitypub.ParsePublicKeyPEM(alice.PublicKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.pub = pub
	p.mu.Unlock()
	c2s := func(body map[string]any) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, base+"/users/alice/outbox", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", activitypub.ContentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", raw, resp.StatusCode, out)
		}
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		return m
	}

	if st := p.post(t, "fan", base+"/inbox", map[string]any{"@context": activitypub.ActivityStreams,
		"id": p.srv.URL + "/follows/1", "type": "Follow", "actor": p.actor("fan"), "object": alice.URI}); st != http.StatusAccepted {
		t.Fatalf("follow answered %d", st)
	}
	waitFor(t, "the fan to follow alice", func() bool {
		fs, err := a.store.FollowerInboxes(ctx, alice.ID)
		return err == nil && len(fs) == 1
	})

	icon := p.srv.URL + "/media/alice.png" // http: allowed with --allow-private-addresses
	c2s(map[string]any{"type": "Update", "object": map[string]any{"id": alice.URI,
		"icon":        map[string]any{"type": "Image", "mediaType": "image/png", "url": icon},
		"attachment":  []any{map[string]any{"type": "PropertyValue", "name": "Site", "value": "https://alice.example"}},
		"alsoKnownAs": []string{p.actor("fan")}}})
	note := c2s(map[string]any{"type": "Note", "content": "pinned", "to": []string{store.Public}})
	noteID, _ := note["object"].(map[string]any)["id"].(string)
	featured := alice.URI + "/featured"
	c2s(map[string]any{"type": "Add", "object": noteID, "target": featured})
	c2s(map[string]any{"type": "Follow", "object": p.actor("old")})

	waitFor(t, "the Update, the Add and the Follow at the peer", func() bool {
		return len(p.find(func(m map[string]any) bool { return m["type"] == "Update" })) == 1 &&
			len(p.find(func(m map[string]any) bool { return m["type"] == "Add" })) == 1 &&
			len(p.find(func(m map[string]any) bool { return m["type"] == "Follow" })) == 1
	})
	upd := p.find(func(m map[string]any) bool { return m["type"] == "Update" })[0]["object"].(map[string]any)
	gotIcon, _ := upd["icon"].(map[string]any)
	att, _ := upd["attachment"].([]any)
	aka, _ := upd["alsoKnownAs"].([]any)
	if gotIcon["url"] != icon || len(att) != 1 || att[0].(map[string]any)["name"] != "Site" || len(aka) != 1 || aka[0] != p.actor("fan") {
		t.Fatalf("the delivered Update: %v", upd)
	}
	add := p.find(func(m map[string]any) bool { return m["type"] == "Add" })[0]
	if add["target"] != featured || add["object"] != noteID || add["actor"] != alice.URI {
		t.Fatalf("the delivered Add: %v", add)
	}

	// The old account moves.
	if st := p.post(t, "old", base+"/inbox", map[string]any{"@context": activitypub.ActivityStreams,
		"id": p.actor("old") + "#moves/1", "type": "Move", "actor": p.actor("old"), "object": p.actor("old"),
		"target": p.actor("new")}); st != http.StatusAccepted {
		t.Fatalf("Move answered %d", st)
	}
	waitFor(t, "the Undo and the Follow of the new account at the peer", func() bool {
		undo := p.find(func(m map[string]any) bool {
			o, _ := m["object"].(map[string]any)
			return m["type"] == "Undo" && o != nil && o["type"] == "Follow" && o["object"] == p.actor("old")
		})
		follow := p.find(func(m map[string]any) bool { return m["type"] == "Follow" && m["object"] == p.actor("new") })
		return len(undo) == 1 && len(follow) == 1 && follow[0]["actor"] == alice.URI
	})
	if st, err := a.store.FollowingState(ctx, alice.ID, p.actor("new")); err != nil || st != store.StatePending {
		t.Fatalf("alice's follow of the new account: %q, %v", st, err)
	}
	if _, err := a.store.FollowingState(ctx, alice.ID, p.actor("old")); err == nil {
		t.Fatal("alice still follows the old account")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.badSigs != 0 {
		t.Fatalf("%d deliveries without a valid signature", p.badSigs)
	}
}
