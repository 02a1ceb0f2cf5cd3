package admin_test

import (
	"context"
	"crypto/rsa"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// inbox is a remote inbox on 127.0.0.1 that verifies the HTTP signature
// and digest of every POST against the local actor's key and answers with
// the status its script gives for each verified POST.
type inbox struct {
	srv      *httptest.Server
	mu       sync.Mutex
	bodies   [][]byte
	statuses []int // answer to the n-th verified POST; the last repeats
	invalid  atomic.Int32
}

func newInbox(t *testing.T, key *rsa.PublicKey, now func() time.Time, statuses ...int) *inbox {
	in := &inbox{statuses: statuses}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || r.Method != http.MethodPost {
			in.invalid.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if err := activitypub.Verify(r, body, key, activitypub.VerifyOptions{Now: now}); err != nil {
			in.invalid.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		in.mu.Lock()
		in.bodies = append(in.bodies, body)
		status := in.statuses[min(len(in.bodies), len(in.statuses))-1]
		in.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(in.srv.Close)
	return in
}

func (in *inbox) posts() [][]byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([][]byte(nil), in.bodies...)
}

// deliverySetup is a bundle whose admin API is wired to a real delivery
// service run by a real outbox worker (one attempt per delivery, so a
// failure dead-letters at once).
type deliverySetup struct {
	*bundle
	svc   *delivery.Service
	actor *store.Actor
}

func setupDelivery(t *testing.T) *deliverySetup {
	t.Helper()
	d := &deliverySetup{}
	d.bundle = setup(t, func(b *bundle, c *admin.Config) {
		fetcher, err := activitypub.NewFetcher(activitypub.FetcherConfig{
			Client: activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true}),
			Signer: activitypub.Signer{KeyID: "https://courier.example/actor#main-key", Key: instanceKey(t)},
			Now:    b.clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		resolver, err := activitypub.NewResolver(activitypub.ResolverConfig{Fetcher: fetcher, Store: b.st, Now: b.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		d.svc, err = delivery.New(delivery.Config{
			DB: b.db, Store: b.st, Resolver: resolver, BaseURL: "https://courier.example", AllowPrivate: true,
			Timeout: 5 * time.Second, Now: b.clock.Now, SlotWait: 200 * time.Millisecond, SlotDefer: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		ds := admin.NewDeliveryState(d.svc, b.queue)
		c.Hosts, c.Deliveries, c.Signatures = ds, ds, d.svc.Schemes()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	reg := outbox.NewRegistry()
	d.svc.Register(reg)
	d.startWorker(reg, 1)
	a, _, err := d.st.CreateActor(d.ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	d.actor = a
	return d
}

var sharedKey struct {
	once sync.Once
	key  *rsa.PrivateKey
	err  error
}

// instanceKey signs the resolver's GETs; one key for every test.
func instanceKey(t *testing.T) *rsa.PrivateKey {
	sharedKey.once.Do(func() { sharedKey.key, sharedKey.err = activitypub.GenerateKey() })
	if sharedKey.err != nil {
		t.Fatal(sharedKey.err)
	}
	return sharedKey.key
}

func (d *deliverySetup) publicKey() *rsa.PublicKey {
	d.t.Helper()
	k, err := activitypub.ParsePrivateKeyPEM(d.actor.PrivateKeyPEM)
	if err != nil {
		d.t.Fatal(err)
	}
	return &k.PublicKey
}

func (d *deliverySetup) follower(uri, inboxURL string) {
	d.t.Helper()
	err := d.db.Tx(d.ctx, func(tx *sql.Tx) error {
		_, err := d.st.AddFollowerTx(d.ctx, tx, store.Follower{ActorID: d.actor.ID, URI: uri, Inbox: inboxURL})
		return err
	})
	if err != nil {
		d.t.Fatal(err)
	}
}

func (d *deliverySetup) note(text string) *store.Activity {
	d.t.Helper()
	act, _, err := notetest.Create(d.ctx, d.st, d.actor, notetest.Input{Content: text,
		To: []string{"https://www.w3.org/ns/activitystreams#Public"}, CC: []string{d.actor.URI + "/followers"}})
	if err != nil {
		d.t.Fatal(err)
	}
	return act
}

// deliveryRow waits for the delivery event of act and returns its row.
func (d *deliverySetup) deliveryRow(act *store.Activity) outbox.Row {
	d.t.Helper()
	var row outbox.Row
	waitFor(d.t, "the delivery of "+act.URI, func() bool {
		rs, err := d.queue.List(d.ctx, outbox.Filter{Type: delivery.EventPost, Limit: 1000})
		if err != nil {
			d.t.Fatal(err)
		}
		for _, r := range rs {
			var p delivery.Post
			if json.Unmarshal(r.Event.Payload, &p) == nil && p.ActivityID == act.URI {
				row = r
				return true
			}
		}
		return false
	})
	return row
}

// A delivery to an inbox that answers 500 is dead-lettered; the activity's
// status shows it failed and why, inbox by inbox; the operator retries it
// through the API and the inbox, now answering 202, receives the same
// signed activity.
func TestRetryDeadLetteredDeliveryThenDelivered(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	in := newInbox(t, d.publicKey(), d.clock.Now, http.StatusInternalServerError, http.StatusAccepted)
	d.follower("https://remote.example/users/bob", in.srv.URL+"/users/bob/inbox")
	host := strings.TrimPrefix(in.srv.URL, "http://")
	act := d.note("hello")
	row := d.deliveryRow(act)
	d.waitStatus(row.Event.ID, outbox.StatusDeadLettered)

	// The delivery service records attempts and host state in batches.
	var st admin.ActivityStatus
	waitFor(t, "the attempt recorded", func() bool {
		st = admin.ActivityStatus{}
		d.call("GET", "/admin/activities/"+act.LocalID(), http.StatusOK, &st)
		return len(st.Inboxes) == 1 && st.Inboxes[0].LastStatus != 0
	})
	if st.ActivityID != act.URI || st.Type != "Create" || st.FanOut == nil || st.FanOut.Status != outbox.StatusDone ||
		len(st.Inboxes) != 1 || st.Summary[admin.StateFailed] != 1 {
		t.Fatalf("activity status %+v", st)
	}
	ib := st.Inboxes[0]
	if ib.Inbox != in.srv.URL+"/users/bob/inbox" || ib.Host != host || ib.State != admin.StateFailed ||
		ib.LastStatus != 500 || ib.Attempts != 1 || ib.LastError == "" || ib.QueueStatus != outbox.StatusDeadLettered ||
		ib.EventID != row.Event.ID || ib.LastAttemptAt.IsZero() {
		t.Errorf("inbox status %+v", ib)
	}
	var ev admin.EventDetail
	d.call("GET", "/admin/events/"+row.Event.ID, http.StatusOK, &ev)
	if len(ev.DeliveryAttempts) != 1 || ev.DeliveryAttempts[0].Status != 500 ||
		ev.DeliveryAttempts[0].Outcome != delivery.OutcomeRetry || ev.DeliveryAttempts[0].Inbox != ib.Inbox {
		t.Errorf("event delivery attempts %+v", ev.DeliveryAttempts)
	}
	var hosts admin.HostList
	d.call("GET", "/admin/hosts", http.StatusOK, &hosts)
	if len(hosts.Hosts) != 1 || hosts.Hosts[0].Host != host || hosts.Hosts[0].ConsecutiveFailures != 1 ||
		hosts.Hosts[0].DeadLettered != 1 || hosts.Hosts[0].Pending != 0 || hosts.Hosts[0].State != delivery.HostFailing {
		t.Errorf("hosts %+v", hosts)
	}

	var res admin.ActionResult
	d.call("POST", "/admin/events/"+row.Event.ID+"/retry", http.StatusOK, &res)
	d.waitStatus(row.Event.ID, outbox.StatusDone)
	waitFor(t, "the success recorded", func() bool {
		st = admin.ActivityStatus{}
		d.call("GET", "/admin/activities/"+act.LocalID(), http.StatusOK, &st)
		return len(st.Inboxes) == 1 && st.Inboxes[0].LastStatus == 202
	})
	if st.Inboxes[0].State != admin.StateDelivered || st.Summary[admin.StateDelivered] != 1 || len(st.Summary) != 1 ||
		st.Inboxes[0].LastError != "" || st.Inboxes[0].Attempts != 0 {
		t.Errorf("after retry: %+v", st)
	}
	posts := in.posts()
	if len(posts) != 2 || string(posts[0]) != string(posts[1]) || in.invalid.Load() != 0 {
		t.Fatalf("inbox got %d verified POSTs (%d invalid); want the same activity twice", len(posts), in.invalid.Load())
	}
	var sent map[string]any
	if err := json.Unmarshal(posts[1], &sent); err != nil || sent["id"] != act.URI {
		t.Errorf("delivered %s, want activity %s", posts[1], act.URI)
	}
	var h admin.Host
	waitFor(t, "the host's success recorded", func() bool {
		h = admin.Host{}
		d.call("GET", "/admin/hosts/"+host, http.StatusOK, &h)
		return !h.LastSuccessAt.IsZero()
	})
	if h.State != delivery.HostHealthy || h.ConsecutiveFailures != 0 || h.LastSuccessAt.IsZero() || h.DeadLettered != 0 {
		t.Errorf("host after a success %+v", h)
	}

	// The CLI shows the activity's inboxes.
	code, out, errOut := d.cli("activity", act.URI)
	if code != 0 || !strings.Contains(out, "INBOX") || !strings.Contains(out, ib.Inbox) ||
		!strings.Contains(out, "delivered 1") {
		t.Errorf("cli activity: %d\n%s\n%s", code, out, errOut)
	}
	d.wantError("GET", "/admin/activities/6f0d9a3c-4f1e-5b8a-9c61-2d7e0b4a8f15", "", http.StatusNotFound, "no local activity")
	d.wantError("GET", "/admin/activities/x", "", http.StatusBadRequest, "want the id of a local activity")
	d.wantError("GET", "/admin/activities/"+act.LocalID()+"?limit=0", "", http.StatusBadRequest, "limit")
}

// The per-host controls: pause holds deliveries without spending attempts,
// drain needs a confirmation and says how many it would discard, resume,
// retry and reset answer with what they released.
func TestHostControls(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	in := newInbox(t, d.publicKey(), d.clock.Now, http.StatusAccepted)
	d.follower("https://remote.example/users/carol", in.srv.URL+"/inbox")
	host := strings.TrimPrefix(in.srv.URL, "http://")
	first := d.note("one")
	d.waitStatus(d.deliveryRow(first).Event.ID, outbox.StatusDone)

	var res admin.ActionResult
	d.call("POST", "/admin/hosts/"+host+"/pause?reason="+url.QueryEscape("maintenance window"), http.StatusOK, &res)
	var h admin.Host
	d.call("GET", "/admin/hosts/"+host, http.StatusOK, &h)
	if !h.Paused || h.PauseReason != "maintenance window" || h.PausedAt.IsZero() {
		t.Errorf("paused host %+v", h)
	}
	held := []*store.Activity{d.note("two"), d.note("three")}
	for _, act := range held {
		row := d.deliveryRow(act)
		waitFor(t, "the paused delivery to be deferred", func() bool {
			r := d.row(row.Event.ID)
			return r.Status == outbox.StatusPending && r.NextAttemptAt.After(d.clock.Now())
		})
		if r := d.row(row.Event.ID); r.Attempts != 0 {
			t.Errorf("a paused delivery spent %d attempts", r.Attempts)
		}
	}
	d.call("GET", "/admin/hosts/"+host, http.StatusOK, &h)
	if h.Pending != 2 || h.Parked != 2 {
		t.Errorf("paused host counts %+v, want 2 pending, 2 parked", h)
	}
	var st admin.ActivityStatus
	d.call("GET", "/admin/activities/"+held[0].LocalID(), http.StatusOK, &st)
	if len(st.Inboxes) != 1 || st.Inboxes[0].State != admin.StateParked {
		t.Errorf("paused delivery status %+v", st.Inboxes)
	}

	// Drain without confirmation changes nothing and says how many.
	status, raw := d.do("POST", "/admin/hosts/"+host+"/drain", token, "")
	var preview admin.DrainPreview
	if err := json.Unmarshal(raw, &preview); err != nil || status != http.StatusConflict ||
		preview.Code != admin.ECONFIRM || preview.WouldDiscard != 2 || preview.Host != host ||
		!strings.Contains(preview.Error, "confirm="+host) {
		t.Errorf("drain without confirm: %d %s", status, raw)
	}
	code, _, errOut := d.cli("hosts", "drain", host)
	if code != 1 || !strings.Contains(errOut, "discards 2 pending deliveries") || !strings.Contains(errOut, "--confirm "+host) ||
		strings.Count(errOut, "\n") != 1 {
		t.Errorf("cli drain without confirm: %d %q", code, errOut)
	}
	d.wantError("POST", "/admin/hosts/"+host+"/drain?confirm=other.example", "", http.StatusBadRequest, "does not name")

	// Resume releases both; the inbox gets them.
	d.call("POST", "/admin/hosts/"+host+"/resume", http.StatusOK, &res)
	if res.Count == nil || *res.Count != 2 {
		t.Errorf("resume answered %+v, want 2 released", res)
	}
	for _, act := range held {
		d.waitStatus(d.deliveryRow(act).Event.ID, outbox.StatusDone)
	}
	if n := len(in.posts()); n != 3 || in.invalid.Load() != 0 {
		t.Errorf("inbox got %d verified POSTs (%d invalid), want 3", n, in.invalid.Load())
	}

	// Drain with confirmation discards what waits.
	d.call("POST", "/admin/hosts/"+host+"/pause", http.StatusOK, &res)
	last := d.note("four")
	lastRow := d.deliveryRow(last)
	waitFor(t, "the paused delivery to be deferred", func() bool {
		return d.row(lastRow.Event.ID).NextAttemptAt.After(d.clock.Now())
	})
	code, out, errOut := d.cli("hosts", "drain", host, "--confirm", host)
	if code != 0 || !strings.Contains(out, "drain "+host+": 1 deliveries") {
		t.Errorf("cli drain: %d %q %q", code, out, errOut)
	}
	d.wantError("GET", "/admin/events/"+lastRow.Event.ID, "", http.StatusNotFound, "no event")
	d.call("GET", "/admin/activities/"+last.LocalID(), http.StatusOK, &st)
	if len(st.Inboxes) != 1 || st.Inboxes[0].State != admin.StateDiscarded {
		t.Errorf("drained delivery status %+v", st.Inboxes)
	}
	if recs := d.logs.records("admin: host drained"); len(recs) != 1 || recs[0]["host"] != host || recs[0]["count"] != float64(1) {
		t.Errorf("drain logs %v", recs)
	}

	d.call("POST", "/admin/hosts/"+host+"/retry", http.StatusOK, &res)
	if res.Count == nil || *res.Count != 0 {
		t.Errorf("retry answered %+v, want 0 released", res)
	}
	d.call("POST", "/admin/hosts/"+host+"/reset", http.StatusOK, &res)
	if res.Action != "reset" || res.Count == nil {
		t.Errorf("reset answered %+v", res)
	}

	// The CLI lists hosts; unknown and malformed hosts are refused.
	code, out, _ = d.cli("hosts")
	if code != 0 || !strings.Contains(out, "HOST") || !strings.Contains(out, host) || !strings.Contains(out, "(paused)") {
		t.Errorf("cli hosts: %d\n%s", code, out)
	}
	code, out, _ = d.cli("hosts", "show", host, "--json")
	var ch admin.Host
	if code != 0 || json.Unmarshal([]byte(out), &ch) != nil || ch.Host != host || !ch.Paused {
		t.Errorf("cli hosts show --json: %d %s", code, out)
	}
	d.wantError("GET", "/admin/hosts/unknown.example", "", http.StatusNotFound, "no delivery state for host unknown.example")
	d.wantError("POST", "/admin/hosts/unknown.example/resume", "", http.StatusNotFound, "no delivery state")
	d.wantError("POST", "/admin/hosts/unknown.example/drain", "", http.StatusNotFound, "no delivery state")
	d.wantError("POST", "/admin/hosts/a%20b/pause", "", http.StatusBadRequest, "want a host name")
	d.wantError("GET", "/admin/hosts?limit=-1", "", http.StatusBadRequest, "limit")
	for _, msg := range []string{"admin: host paused", "admin: host resumed", "admin: host deliveries released", "admin: host reset"} {
		if len(d.logs.records(msg)) == 0 {
			t.Errorf("no %q log", msg)
		}
	}
}

// Hosts and an activity's inboxes page with cursors.
func TestHostsAndInboxesPage(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	in := newInbox(t, d.publicKey(), d.clock.Now, http.StatusAccepted)
	var want []string
	for _, name := range []string{"dan", "eve", "fay", "gus", "hal"} {
		inbox := in.srv.URL + "/users/" + name + "/inbox"
		d.follower("https://remote.example/users/"+name, inbox)
		want = append(want, inbox)
	}
	act := d.note("to five inboxes")
	waitFor(t, "five deliveries", func() bool {
		// A host that has not answered yet gets one POST at a time; the
		// others defer themselves on the injected clock, which only moves
		// when told.
		d.clock.Advance(2 * time.Second)
		var st admin.ActivityStatus
		d.call("GET", "/admin/activities/"+act.LocalID()+"?limit=500", http.StatusOK, &st)
		return st.Summary[admin.StateDelivered] == 5
	})
	var got []string
	cur := ""
	for page := 0; page < 10; page++ {
		var st admin.ActivityStatus
		d.call("GET", "/admin/activities/"+act.LocalID()+"?limit=2&cursor="+url.QueryEscape(cur), http.StatusOK, &st)
		for _, ib := range st.Inboxes {
			got = append(got, ib.Inbox)
		}
		if st.NextCursor == "" {
			break
		}
		cur = st.NextCursor
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("paged inboxes %v, want %v", got, want)
	}

	// Pausing a host courier never delivered to records it.
	var names []string
	for _, h := range []string{"a.example", "b.example", "c.example"} {
		d.call("POST", "/admin/hosts/"+h+"/pause", http.StatusOK, nil)
		names = append(names, h)
	}
	loopback := strings.TrimPrefix(in.srv.URL, "http://")
	names = append([]string{loopback}, names...) // "1" sorts before "a"
	waitFor(t, "the delivered host recorded", func() bool {
		status, _ := d.do("GET", "/admin/hosts/"+loopback, token, "")
		return status == http.StatusOK
	})
	var hosts []string
	cur = ""
	for page := 0; page < 10; page++ {
		var l admin.HostList
		d.call("GET", "/admin/hosts?limit=3&cursor="+url.QueryEscape(cur), http.StatusOK, &l)
		for _, h := range l.Hosts {
			hosts = append(hosts, h.Host)
		}
		if l.NextCursor == "" {
			break
		}
		cur = l.NextCursor
	}
	if strings.Join(hosts, " ") != strings.Join(names, " ") {
		t.Errorf("paged hosts %v, want %v", hosts, names)
	}
}

// A dead-lettered Create whose note is then deleted: the Delete goes, and
// the operator's retry of the Create sends nothing: it settles as
// superseded, which the event shows, and a second retry says why it is
// refused.
func TestRetryOfCreateOfDeletedNoteIsSuperseded(t *testing.T) {
	t.Parallel()
	d := setupDelivery(t)
	in := newInbox(t, d.publicKey(), d.clock.Now, http.StatusInternalServerError, http.StatusAccepted)
	d.follower("https://remote.example/users/bob", in.srv.URL+"/users/bob/inbox")
	act, note, err := notetest.Create(d.ctx, d.st, d.actor, notetest.Input{Content: "soon gone",
		To: []string{"https://www.w3.org/ns/activitystreams#Public"}, CC: []string{d.actor.URI + "/followers"}})
	if err != nil {
		t.Fatal(err)
	}
	row := d.deliveryRow(act)
	d.waitStatus(row.Event.ID, outbox.StatusDeadLettered)
	del, err := d.st.DeleteObject(d.ctx, d.actor, note.URI)
	if err != nil {
		t.Fatal(err)
	}
	d.waitStatus(d.deliveryRow(del).Event.ID, outbox.StatusDone)

	var res admin.ActionResult
	d.call("POST", "/admin/events/"+row.Event.ID+"/retry", http.StatusOK, &res)
	d.waitStatus(row.Event.ID, outbox.StatusDone)
	if posts := in.posts(); len(posts) != 2 || !strings.Contains(string(posts[1]), `"Delete"`) {
		t.Fatalf("inbox got %d POSTs, want the Create (500) and the Delete, not the Create again", len(posts))
	}
	var ev admin.EventDetail
	d.call("GET", "/admin/events/"+row.Event.ID, http.StatusOK, &ev)
	if !ev.Event.Superseded || ev.Event.Status != outbox.StatusDone {
		t.Errorf("event %+v, want done and superseded", ev.Event)
	}
	var st admin.ActivityStatus
	d.call("GET", "/admin/activities/"+act.LocalID(), http.StatusOK, &st)
	if len(st.Inboxes) != 1 || st.Inboxes[0].State != admin.StateSuperseded {
		t.Errorf("activity status %+v, want its inbox superseded", st)
	}
	raw := d.call("POST", "/admin/events/"+row.Event.ID+"/retry", http.StatusConflict, nil)
	if !strings.Contains(string(raw), "superseded") {
		t.Errorf("second retry: %s, want it to say the event was superseded", raw)
	}
}
