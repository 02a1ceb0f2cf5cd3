package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/internal/testnet"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
)

// hookReceiver is an application's webhook endpoint on loopback: it
// verifies every POST with the Standard Webhooks Go library (timestamp
// tolerance included: courier runs on the real clock here) and records
// it. While hold is set, a POST is recorded and then left unanswered
// until the client goes away (a crash of the sender) or the test ends.
type hookReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	wh   *standardwebhooks.Webhook
	got  []hookMsg
	bad  []string
	hold bool
	// arrived is signalled (without blocking) on every POST.
	arrived chan struct{}
	stop    chan struct{}
}

type hookMsg struct {
	ID   string
	Type string
	Body map[string]any
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{arrived: make(chan struct{}, 1000), stop: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() { close(r.stop); r.srv.Close() })
	return r
}

func (r *hookReceiver) setSecret(t *testing.T, secret string) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("secret %q: %v", secret, err)
	}
	r.mu.Lock()
	r.wh = wh
	r.mu.Unlock()
}

func (r *hookReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	r.mu.Lock()
	if r.wh == nil {
		r.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if err := r.wh.Verify(body, req.Header); err != nil {
		r.bad = append(r.bad, err.Error())
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var m hookMsg
	_ = json.Unmarshal(body, &m.Body)
	m.ID = req.Header.Get("webhook-id")
	m.Type, _ = m.Body["type"].(string)
	r.got = append(r.got, m)
	hold := r.hold
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	if hold {
		select {
		case <-req.Context().Done():
		case <-r.stop:
		}
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *hookReceiver) messages() ([]hookMsg, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hookMsg(nil), r.got...), append([]string(nil), r.bad...)
}

func (r *hookReceiver) ofType(typ string) []hookMsg {
	ms, _ := r.messages()
	var out []hookMsg
	for _, m := range ms {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

var secretOnPage = regexp.MustCompile(`<code id="secret">(whsec_[^<]+)</code>`)

// The console's webhooks page: the operator adds an endpoint for alice and
// sees its secret once; a remote Follow of alice reaches the endpoint as a
// signed activity.follow (verified by the Standard Webhooks library); the
// page shows the endpoint healthy with nothing pending, and its test
// button sends a webhook.test.
func TestConsoleWebhooks(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	recv := newHookReceiver(t)
	cc := newConsoleClient(t, rig.ops)
	if resp, _ := cc.do(http.MethodPost, "/console/login", url.Values{"token": {consoleToken}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %d", resp.StatusCode)
	}
	csrf := cc.csrf()
	if resp, body := cc.do(http.MethodPost, "/console/webhooks", url.Values{"url": {recv.srv.URL}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("add without CSRF: %d %s", resp.StatusCode, body)
	}
	resp, page := cc.do(http.MethodPost, "/console/webhooks", url.Values{"csrf": {csrf}, "url": {recv.srv.URL + "/hooks"},
		"actor": {"alice"}, "events": {"activity.follow, webhook.test"}}, nil)
	m := secretOnPage.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("add: %d\n%s", resp.StatusCode, page)
	}
	m[1] = html.UnescapeString(m[1])
	recv.setSecret(t, m[1])
	if _, page = cc.do(http.MethodGet, "/console/webhooks", nil, nil); strings.Contains(html.UnescapeString(page), m[1]) || !strings.Contains(page, `data-webhook="1"`) {
		t.Fatalf("the list shows the secret again, or no endpoint:\n%s", page)
	}
	if resp, body := cc.do(http.MethodPost, "/console/webhooks", url.Values{"csrf": {csrf}, "url": {"ftp://x.example/"}}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "http or https") {
		t.Fatalf("bad URL: %d %s", resp.StatusCode, body)
	}

	rig.follow(t)
	waitFor(t, "the activity.follow webhook", func() bool { return len(recv.ofType("activity.follow")) == 1 })
	msg := recv.ofType("activity.follow")[0]
	data, _ := msg.Body["data"].(map[string]any)
	act, _ := data["activity"].(map[string]any)
	if data["actor"] != "alice" || act["type"] != "Follow" || act["object"] != rig.alice.URI || msg.ID == "" {
		t.Fatalf("webhook %+v", msg)
	}
	if _, bad := recv.messages(); len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	waitFor(t, "the endpoint shown healthy, nothing pending", func() bool {
		_, page = cc.do(http.MethodGet, "/console/webhooks", nil, nil)
		return strings.Contains(page, `<span class="tag healthy">healthy</span>`) && strings.Contains(page, "<td>0</td><td>0</td><td>0</td>")
	})
	resp, _ = cc.do(http.MethodPost, "/console/webhooks/1/test", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("test: %d", resp.StatusCode)
	}
	waitFor(t, "the test webhook", func() bool { return len(recv.ofType("webhook.test")) == 1 })
	// The metrics count the webhook POSTs apart from deliveries.
	waitFor(t, "courier_webhook_attempts_total", func() bool {
		resp, err := http.Get(rig.ops + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `courier_webhook_attempts_total{outcome="delivered",status_class="2xx"} 2`)
	})
	resp, page = cc.do(http.MethodPost, "/console/webhooks/1/rotate", url.Values{"csrf": {csrf}}, nil)
	if m2 := secretOnPage.FindStringSubmatch(page); resp.StatusCode != http.StatusOK || m2 == nil || m2[1] == m[1] {
		t.Fatalf("rotate: %d\n%s", resp.StatusCode, page)
	}
	resp, page = cc.do(http.MethodPost, "/console/webhooks/1/remove", url.Values{"csrf": {csrf}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Remove webhook 1?") {
		t.Fatalf("remove without confirm: %d\n%s", resp.StatusCode, page)
	}
	if resp, _ = cc.do(http.MethodPost, "/console/webhooks/1/remove", url.Values{"csrf": {csrf}, "confirm": {"1"}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %d", resp.StatusCode)
	}
	if _, page = cc.do(http.MethodGet, "/console/webhooks", nil, nil); !strings.Contains(page, "No webhook endpoint") {
		t.Fatalf("after remove:\n%s", page)
	}
}

// courier is SIGKILLed after it imported a Follow of alice and while its
// webhook POST is unanswered: the restarted courier sends the webhook
// again, with the same webhook-id, and it is verified by the Standard
// Webhooks library both times. Then courier is SIGKILLed after importing
// a Create whose webhook was never tried (its endpoint paused): the
// webhook's row was committed with the import, and the restarted courier
// sends it, with that row's id, once the endpoint is resumed.
func TestWebhookSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	loc := storetest.Location(t)
	key, err := activitypub.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	remote := newRemoteHost(t, key, http.StatusAccepted)
	recv := newHookReceiver(t)
	recv.hold = true

	lnAddr, addr := heldAddr(t)
	base := "http://" + addr
	adminToken := "d2b7f4a91c6e0835fa4e17b9c20d6e58a3f1"
	common := []string{"--db", loc, "--bus", "db", "--base-url", base, "--allow-private-addresses", "--admin-token", adminToken,
		"--synchronous", "NORMAL", "--delivery-timeout", "3s", "--lease", "10s", "--ledger-lease", "10s", "--log-level", "info"}
	lnOps, ops := heldAddr(t)
	srv := startProcessOn(t, "courier", []net.Listener{lnAddr, lnOps}, append([]string{"serve", "--listen", addr, "--ops-listen", ops}, common...)...)
	srv.waitReady(t, ops)
	code, out, errb := runCommand("actor", "create", "--db", loc, "--base-url", base, "--json", "alice")
	if code != 0 {
		t.Fatalf("actor create: exit %d, stderr %q", code, errb)
	}
	var alice struct{ ID string }
	if err := json.Unmarshal([]byte(out), &alice); err != nil {
		t.Fatal(err)
	}
	code, out, errb = runCommand("admin", "--server", "http://"+ops, "--admin-token", adminToken, "--json",
		"webhooks", "add", recv.srv.URL+"/hooks", "--actor", "alice", "--events", "activity.follow,activity.create")
	var added struct {
		ID     int64
		Secret string
	}
	if code != 0 || json.Unmarshal([]byte(out), &added) != nil || added.Secret == "" {
		t.Fatalf("webhooks add: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	recv.setSecret(t, added.Secret)

	follow := map[string]any{"@context": activitypub.ActivityStreams, "id": remote.srv.URL + "/follows/1",
		"type": "Follow", "actor": remote.actorID(), "object": alice.ID}
	if st := remote.post(t, base+"/inbox", follow); st != http.StatusAccepted {
		t.Fatalf("follow answered %d", st)
	}
	waitFor(t, "the first webhook POST", func() bool { return len(recv.ofType("activity.follow")) == 1 })
	if err := srv.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-srv.done
	if strings.Contains(srv.stderr.String(), added.Secret) || strings.Contains(srv.stderr.String(), added.Secret[6:]) {
		t.Fatal("the secret was logged")
	}
	recv.mu.Lock()
	recv.hold = false
	recv.mu.Unlock()

	lnOps2, ops2 := heldAddr(t)
	lnSrv2, srv2Addr := heldAddr(t)
	srv2 := startProcessOn(t, "courier again", []net.Listener{lnSrv2, lnOps2}, append([]string{"serve", "--listen", srv2Addr, "--ops-listen", ops2}, common...)...)
	srv2.waitReady(t, ops2)
	waitLong(t, "the webhook again after the restart", func() bool { return len(recv.ofType("activity.follow")) == 2 })
	msgs := recv.ofType("activity.follow")
	if msgs[0].ID == "" || msgs[0].ID != msgs[1].ID {
		t.Fatalf("webhook-ids %q and %q: want the same", msgs[0].ID, msgs[1].ID)
	}
	if _, bad := recv.messages(); len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	db := storetest.Open(t, loc, storetest.Options{})
	var status string
	waitFor(t, "the webhook's row done", func() bool {
		return db.Read.QueryRow(`SELECT status FROM event_queue WHERE event_id = ?`, msgs[0].ID).Scan(&status) == nil && status == "done"
	})
	// The import happened once: one follower, one Accept, one webhook event.
	var followers, events int
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM followers`).Scan(&followers); err != nil || followers != 1 {
		t.Fatalf("followers: %d %v", followers, err)
	}
	if err := db.Read.QueryRow(`SELECT COUNT(*) FROM event_queue WHERE type = 'webhook.post'`).Scan(&events); err != nil || events != 1 {
		t.Fatalf("webhook events: %d %v", events, err)
	}

	// Killed before the POST was even tried: the endpoint paused (as a
	// host), a Create imported, its webhook row committed with the import;
	// SIGKILL; the restarted courier sends it once the endpoint resumes.
	host := fmt.Sprintf("webhook-%d.invalid", added.ID)
	admin := func(ops string, args ...string) {
		t.Helper()
		code, out, errb := runCommand(append([]string{"admin", "--server", "http://" + ops, "--admin-token", adminToken}, args...)...)
		if code != 0 {
			t.Fatalf("admin %v: exit %d, %q %q", args, code, out, errb)
		}
	}
	admin(ops2, "hosts", "pause", host, "--reason", "crash test")
	create := map[string]any{"@context": activitypub.ActivityStreams, "id": remote.srv.URL + "/creates/1", "type": "Create",
		"actor": remote.actorID(), "to": []string{alice.ID}, "object": map[string]any{"id": remote.srv.URL + "/notes/1",
			"type": "Note", "attributedTo": remote.actorID(), "to": []string{alice.ID}, "content": "hi"}}
	if st := postVia(remote, srv2Addr, base+"/users/alice/inbox", create); st != http.StatusAccepted {
		t.Fatalf("create answered %d", st)
	}
	var createID string
	waitFor(t, "the Create's webhook row", func() bool {
		return db.Read.QueryRow(`SELECT event_id FROM event_queue WHERE type = 'webhook.post' AND event_id <> ?`, msgs[0].ID).Scan(&createID) == nil
	})
	if err := srv2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-srv2.done
	if n := len(recv.ofType("activity.create")); n != 0 {
		t.Fatalf("the paused endpoint got %d creates", n)
	}
	lnOps3, ops3 := heldAddr(t)
	lnSrv3, srv3Addr := heldAddr(t)
	srv3 := startProcessOn(t, "courier a third time", []net.Listener{lnSrv3, lnOps3}, append([]string{"serve", "--listen", srv3Addr, "--ops-listen", ops3}, common...)...)
	srv3.waitReady(t, ops3)
	admin(ops3, "hosts", "resume", host)
	waitLong(t, "the Create's webhook after the restart", func() bool { return len(recv.ofType("activity.create")) == 1 })
	if got := recv.ofType("activity.create")[0].ID; got != createID {
		t.Fatalf("webhook-id %q, want the row's event id %q", got, createID)
	}
	if _, bad := recv.messages(); len(bad) > 0 {
		t.Fatalf("signatures refused: %v", bad)
	}
	srv3.stop(t)
}

// waitLong is waitFor for what waits on leases and restarts: up to three
// minutes.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The example receiving application (examples/webhook-receiver), built
// and run as its own process against a running courier: it verifies the
// webhooks of a remote Follow of alice and of a test event and prints each
// once.
func TestExampleWebhookReceiver(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "webhook-receiver")
	build := exec.Command("go", "build", "-o", bin,
		"github.com/courier-ap/courier/examples/webhook-receiver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rig := newConsoleRig(t)
	// The receiver picks its own port; the endpoint is a gate the test
	// holds, opened to the receiver once it says where it listens.
	gate := testnet.NewGate(t)
	ep, secret, err := rig.app.webhooks.Add(context.Background(), "http://"+gate.Addr()+"/", "alice", []string{"activity.follow", "webhook.test"})
	if err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+secret)
	cmd.Stdout = out
	errOut := &lockedBuffer{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var listening string
	waitFor(t, "the receiver listening", func() bool {
		_, after, ok := strings.Cut(errOut.String(), "listening on ")
		listening, _, _ = strings.Cut(after, "\n")
		return ok && strings.Contains(after, "\n")
	})
	gate.Open(strings.TrimSpace(listening))

	rig.follow(t)
	if _, err := rig.app.webhooks.Test(context.Background(), ep.ID); err != nil {
		t.Fatal(err)
	}
	type line struct {
		ID, Type string
		Data     struct {
			Actor    string
			Activity map[string]any
		}
	}
	var lines []line
	waitLong(t, "both events printed by the receiver", func() bool {
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var x line
			if json.Unmarshal([]byte(l), &x) == nil {
				lines = append(lines, x)
			}
		}
		return len(lines) == 2
	})
	types := map[string]line{}
	for _, l := range lines {
		types[l.Type] = l
	}
	f, ok := types["activity.follow"]
	if !ok || f.Data.Actor != "alice" || f.Data.Activity["object"] != rig.alice.URI || types["webhook.test"].ID == "" {
		t.Fatalf("printed:\n%s", out.String())
	}
	// Every webhook was accepted: nothing pending or dead for the endpoint.
	waitFor(t, "the endpoint's events done", func() bool {
		st, err := rig.app.queue.Stats(context.Background())
		return err == nil && st["done"]["webhook.post"] == 2 && st["pending"]["webhook.post"] == 0
	})
	if strings.Contains(errOut.String(), "401") {
		t.Fatalf("receiver: %s", errOut.String())
	}
}

// A Follow of an actor that approves its followers reaches its endpoint as
// follow.requested, and the endpoint of another actor gets nothing.
func TestFollowRequestWebhook(t *testing.T) {
	t.Parallel()
	rig := newConsoleRig(t)
	bg := context.Background()
	bob, _, err := rig.app.store.CreateActor(bg, store.NewActor{Name: "bob", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	forBob, forAlice := newHookReceiver(t), newHookReceiver(t)
	for _, x := range []struct {
		r     *hookReceiver
		actor string
	}{{forBob, "bob"}, {forAlice, "alice"}} {
		_, secret, err := rig.app.webhooks.Add(bg, x.r.srv.URL, x.actor, []string{"follow.requested", "activity.follow"})
		if err != nil {
			t.Fatal(err)
		}
		x.r.setSecret(t, secret)
	}
	h := rig.remote.host
	act := map[string]any{"@context": activitypub.ActivityStreams, "id": h.srv.URL + "/follows/bob",
		"type": "Follow", "actor": h.actorID(), "object": bob.URI}
	if st := h.post(t, rig.public+"/inbox", act); st != http.StatusAccepted {
		t.Fatalf("follow answered %d", st)
	}
	waitFor(t, "follow.requested", func() bool { return len(forBob.ofType("follow.requested")) == 1 })
	m := forBob.ofType("follow.requested")[0]
	data, _ := m.Body["data"].(map[string]any)
	if data["actor"] != "bob" || data["kind"] != "follow_request" {
		t.Fatalf("follow.requested %+v", m.Body)
	}
	if all, bad := forBob.messages(); len(all) != 1 || len(bad) > 0 {
		t.Fatalf("bob's endpoint got %d messages (%v)", len(all), bad)
	}
	if all, _ := forAlice.messages(); len(all) != 0 {
		t.Fatalf("alice's endpoint got %d messages", len(all))
	}
}
