package app_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

const public = "https://www.w3.org/ns/activitystreams#Public"

// TestInboxOwnerOnly: the inbox and its stream answer their actor's token
// only: 401 with WWW-Authenticate without one or with a wrong one, 403
// with another actor's, 404 for no such actor.
func TestInboxOwnerOnly(t *testing.T) {
	b := setup(t, app.Config{})
	alice, aliceTok := b.actor(t, "alice", false)
	_, bobTok := b.actor(t, "bob", false)
	inboxURL := b.base + "/users/alice/inbox"
	for _, u := range []string{inboxURL, inboxURL + "?page=true", inboxURL + "/stream"} {
		resp, body := get(t, u, "")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s without a token: %d %q %s", u, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
		if resp, body = get(t, u, bobTok); resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET %s with bob's token: %d %s", u, resp.StatusCode, body)
		}
		if resp, body = get(t, u, "not-a-token"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d %s", u, resp.StatusCode, body)
		}
	}
	if resp, body := get(t, b.base+"/users/nobody/inbox", aliceTok); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the inbox of no one: %d %s", resp.StatusCode, body)
	}
	c := getPage(t, inboxURL, aliceTok)
	if c.Type != "OrderedCollection" || c.ID != inboxURL || c.EventStream != inboxURL+"/stream" ||
		c.TotalItems == nil || *c.TotalItems != 0 || c.First == "" {
		t.Errorf("alice's inbox: %+v", c)
	}
	// The token as the access_token parameter, as an EventSource sends it.
	if resp, body := get(t, inboxURL+"?access_token="+url.QueryEscape(aliceTok), ""); resp.StatusCode != http.StatusOK {
		t.Errorf("GET with access_token: %d %s", resp.StatusCode, body)
	}
	// Bad parameters are named.
	for _, q := range []string{"?page=true&max_id=-1", "?type=Cre%20ate", "?notifications=maybe"} {
		if resp, body := get(t, inboxURL+q, aliceTok); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET %s: %d %s", q, resp.StatusCode, body)
		}
	}
	_ = alice
}

// TestInboxConcerns: imports over real signed HTTP land in the views of the
// local actors they concern, with their kinds, each item the activity as
// received with its object embedded as stored; filters pick by type and
// notifications.
func TestInboxConcerns(t *testing.T) {
	b := setup(t, app.Config{})
	alice, aliceTok := b.actor(t, "alice", false)
	carol, carolTok := b.actor(t, "carol", true)
	_, _ = carol, carolTok
	aliceURI := b.base + "/users/alice"
	note, _, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "hello", To: []string{public}})
	if err != nil {
		t.Fatal(err)
	}
	noteURI := note.ObjectURI
	bob, dan := b.remoteActor("bob"), b.remoteActor("dan")
	b.follows(t, alice, bob)

	type want struct {
		id, kind string
	}
	var wants []want
	postFor := func(kind string, act map[string]any) {
		t.Helper()
		b.post(t, act)
		wants = append(wants, want{act["id"].(string), kind})
		b.waitItems(t, alice, len(wants)) // imports run concurrently: one at a time keeps the order
	}
	obj := func(extra map[string]any) map[string]any {
		o := map[string]any{"id": b.id("note"), "type": "Note", "attributedTo": dan, "content": "<p>hi</p>"}
		for k, v := range extra {
			o[k] = v
		}
		return o
	}
	// A mention by someone alice does not follow, through the shared inbox.
	postFor(app.KindMention, map[string]any{"id": b.id("create"), "type": "Create", "actor": dan, "to": []string{public},
		"object": obj(map[string]any{"to": []string{public}, "tag": []map[string]string{{"type": "Mention", "href": aliceURI}}})})
	// A direct message.
	postFor(app.KindDirect, map[string]any{"id": b.id("create"), "type": "Create", "actor": dan, "to": []string{aliceURI},
		"object": obj(map[string]any{"to": []string{aliceURI}})})
	// A reply to alice's note.
	postFor(app.KindReply, map[string]any{"id": b.id("create"), "type": "Create", "actor": dan, "to": []string{public},
		"object": obj(map[string]any{"to": []string{public}, "inReplyTo": noteURI})})
	// A Like and an Announce of it, by id only: the note embedded as stored.
	likeID := b.id("like")
	postFor(app.KindLike, map[string]any{"id": likeID, "type": "Like", "actor": dan, "object": noteURI})
	postFor(app.KindAnnounce, map[string]any{"id": b.id("announce"), "type": "Announce", "actor": dan, "object": noteURI,
		"to": []string{public}})
	// A Follow of alice (accepted).
	postFor(app.KindFollow, map[string]any{"id": b.id("follow"), "type": "Follow", "actor": dan, "object": aliceURI})
	// What bob, whom alice follows, posts to his followers: her timeline.
	postFor("", map[string]any{"id": b.id("create"), "type": "Create", "actor": bob, "to": []string{bob + "/followers"},
		"object": map[string]any{"id": b.id("note"), "type": "Note", "attributedTo": bob, "content": "news",
			"to": []string{bob + "/followers"}}})
	// The Undo of the Like: a Remove from alice's view.
	postFor("", map[string]any{"id": b.id("undo"), "type": "Undo", "actor": dan,
		"object": map[string]any{"id": likeID, "type": "Like", "actor": dan, "object": noteURI}})
	// An emoji reaction as older Pleroma names it (EmojiReaction): a
	// reaction, as the import counts it.
	postFor(app.KindReaction, map[string]any{"id": b.id("react"), "type": "EmojiReaction", "actor": dan, "object": noteURI,
		"content": "🔥"})
	// A Follow of carol, who approves her followers: a follow request.
	b.post(t, map[string]any{"id": b.id("follow"), "type": "Follow", "actor": dan, "object": b.base + "/users/carol"})
	b.waitItems(t, carol, 1)
	b.waitItems(t, alice, len(wants))

	inboxURL := b.base + "/users/alice/inbox"
	c := getPage(t, inboxURL, aliceTok)
	if c.TotalItems == nil || *c.TotalItems != int64(len(wants)) {
		t.Errorf("totalItems %v, want %d", c.TotalItems, len(wants))
	}
	p := getPage(t, c.First, aliceTok)
	ids := itemIDs(t, p)
	var wantIDs []string
	for i := len(wants) - 1; i >= 0; i-- {
		wantIDs = append(wantIDs, wants[i].id)
	}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("alice's inbox, newest first:\n got %v\nwant %v", ids, wantIDs)
	}
	// Kinds, as recorded.
	for _, w := range wants {
		var kind string
		if err := b.db.Read.QueryRow(`SELECT kind FROM app_inbox_items WHERE actor_id = ? AND activity_uri = ?`,
			alice.ID, w.id).Scan(&kind); err != nil {
			t.Fatal(err)
		}
		if kind != w.kind {
			t.Errorf("%s: kind %q, want %q", w.id, kind, w.kind)
		}
	}
	var carolKind string
	if err := b.db.Read.QueryRow(`SELECT kind FROM app_inbox_items WHERE actor_id = ?`, carol.ID).Scan(&carolKind); err != nil ||
		carolKind != app.KindFollowRequest {
		t.Errorf("carol's item: %q %v", carolKind, err)
	}
	// Each item carries its seq and kind, as its webhook does.
	for _, raw := range p.OrderedItems {
		var a struct {
			ID   string  `json:"id"`
			Seq  *int64  `json:"seq"`
			Kind *string `json:"kind"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		var seq int64
		var kind string
		if err := b.db.Read.QueryRow(`SELECT seq, kind FROM app_inbox_items WHERE actor_id = ? AND activity_uri = ?`,
			alice.ID, a.ID).Scan(&seq, &kind); err != nil {
			t.Fatal(err)
		}
		if a.Seq == nil || *a.Seq != seq {
			t.Errorf("%s: seq %v, want %d", a.ID, a.Seq, seq)
		}
		if (kind == "") != (a.Kind == nil) || (a.Kind != nil && *a.Kind != kind) {
			t.Errorf("%s: kind %v, want %q", a.ID, a.Kind, kind)
		}
	}
	// The Like came by id: its item embeds the note as stored.
	for _, raw := range p.OrderedItems {
		var a struct {
			ID     string          `json:"id"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if a.ID == likeID {
			var o struct {
				ID      string `json:"id"`
				Content string `json:"content"`
			}
			if err := json.Unmarshal(a.Object, &o); err != nil || o.ID != noteURI || o.Content == "" {
				t.Errorf("the Like's object: %s (%v)", a.Object, err)
			}
		}
	}
	// Filters.
	p = getPage(t, inboxURL+"?page=true&type=Like,Announce", aliceTok)
	if got := itemIDs(t, p); len(got) != 2 || got[0] != wants[4].id || got[1] != wants[3].id {
		t.Errorf("type=Like,Announce: %v", got)
	}
	// A type named twice is read once: each item once, and the page's own
	// links name it once.
	p = getPage(t, inboxURL+"?page=true&type=Like,Announce,Like,%20Like", aliceTok)
	if got := itemIDs(t, p); len(got) != 2 || got[0] != wants[4].id || got[1] != wants[3].id {
		t.Errorf("type=Like,Announce,Like, Like: %v", got)
	}
	if strings.Count(p.ID, "Like") != 1 {
		t.Errorf("type=Like,Announce,Like, Like: the page's id %s", p.ID)
	}
	p = getPage(t, inboxURL+"?page=true&notifications=true", aliceTok)
	var notif []string
	for i := len(wants) - 1; i >= 0; i-- {
		if wants[i].kind != "" {
			notif = append(notif, wants[i].id)
		}
	}
	if got := itemIDs(t, p); !slices.Equal(got, notif) {
		t.Errorf("notifications=true:\n got %v\nwant %v", got, notif)
	}
	p = getPage(t, inboxURL+"?page=true&notifications=true&type=Create", aliceTok)
	if got := itemIDs(t, p); len(got) != 3 {
		t.Errorf("notifications=true&type=Create: %v", got)
	}
	c = getPage(t, inboxURL+"?type=Create", aliceTok)
	if c.TotalItems != nil || !strings.Contains(c.First, "type=Create") {
		t.Errorf("a filtered collection: %+v", c)
	}
}

// TestInboxPagingUnderConcurrentImports: a client walks the inbox by its
// cursors while signed activities for the actor arrive over HTTP and are
// imported concurrently (four import workers; on PostgreSQL side by side,
// ordered by the counter's row lock), and while other transactions record
// several items at once; every item is seen exactly once: the older ones by
// next (max_id), the newer ones by prev (min_id).
func TestInboxPagingUnderConcurrentImports(t *testing.T) {
	b := setup(t, app.Config{PageSize: 7})
	alice, tok := b.actor(t, "alice", false)
	aliceURI := b.base + "/users/alice"
	dan := b.remoteActor("dan")
	record := func(n int, tag string) error {
		return b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			items := make([]app.Item, n)
			for i := range items {
				id := fmt.Sprintf("https://remote.example/activities/%s/%d", tag, i)
				items[i] = app.Item{ActorID: alice.ID, ActivityURI: id, Type: "Create",
					Activity: json.RawMessage(fmt.Sprintf(`{"id":%q,"type":"Create"}`, id))}
			}
			return b.rec.RecordTx(b.ctx, tx, items...)
		})
	}
	dm := func() map[string]any {
		return map[string]any{"id": b.id("create"), "type": "Create", "actor": dan, "to": []string{aliceURI},
			"object": map[string]any{"id": b.id("note"), "type": "Note", "attributedTo": dan, "content": "psst",
				"to": []string{aliceURI}}}
	}
	for i := range 20 {
		if err := record(1, fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	inboxURL := b.base + "/users/alice/inbox"
	first := getPage(t, inboxURL+"?page=true", tok)

	var wg sync.WaitGroup
	const senders, each = 4, 12
	var items atomic.Int64
	items.Store(20)
	for w := range senders {
		wg.Add(2)
		go func() { // signed activities over HTTP, imported by the workers
			defer wg.Done()
			for range each {
				if err := b.send(dm()); err != nil {
					t.Error(err)
					return
				}
				items.Add(1)
			}
		}()
		go func() { // transactions recording several items at once
			defer wg.Done()
			for i := range each / 2 {
				if err := record(1+i%3, fmt.Sprintf("during-%d-%d", w, i)); err != nil {
					t.Error(err)
					return
				}
				items.Add(int64(1 + i%3))
			}
		}()
	}
	seen := map[string]int{}
	add := func(p page) {
		for _, id := range itemIDs(t, p) {
			seen[id]++
		}
	}
	add(first)
	// Older, by next.
	for p := first; p.Next != ""; {
		p = getPage(t, p.Next, tok)
		add(p)
	}
	// Newer, by prev, while the imports run, and once more after.
	prev := first.Prev
	walkNewer := func() {
		for {
			p := getPage(t, prev, tok)
			add(p)
			if len(p.OrderedItems) == 0 {
				return
			}
			prev = p.Prev
		}
	}
	walkNewer()
	wg.Wait()
	if t.Failed() {
		return
	}
	b.waitItems(t, alice, int(items.Load()))
	walkNewer()

	var total, maxSeq int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*), MAX(seq) FROM app_inbox_items WHERE actor_id = ?`, alice.ID).Scan(&total, &maxSeq); err != nil {
		t.Fatal(err)
	}
	if maxSeq != total {
		t.Errorf("seqs run to %d over %d items: a gap or a repeat", maxSeq, total)
	}
	if len(seen) != total {
		t.Errorf("the walk saw %d distinct items of %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", id, n)
		}
	}
}

// TestStream: the event stream sends each new item as an event whose id is
// its seq, shaped as the SSE draft says (Add to the inbox, Remove for an
// Undo); a client that reconnects with Last-Event-ID gets exactly what it
// missed; idle streams get keep-alive comments; streams over the bounds get
// 503 with Retry-After.
func TestStream(t *testing.T) {
	b := setup(t, app.Config{KeepAlive: 50 * time.Millisecond, MaxStreamsPerActor: 1, Poll: time.Hour})
	alice, tok := b.actor(t, "alice", false)
	aliceURI := b.base + "/users/alice"
	dan := b.remoteActor("dan")
	streamURL := b.base + "/users/alice/inbox/stream"
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()

	s, resp := openStream(t, ctx, streamURL, tok, "")
	if s == nil {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	// A second stream of alice's is over her bound.
	if s2, resp2 := openStream(t, ctx, streamURL, tok, ""); s2 != nil || resp2.StatusCode != http.StatusServiceUnavailable ||
		resp2.Header.Get("Retry-After") == "" {
		t.Errorf("a second stream: %d %q", resp2.StatusCode, resp2.Header.Get("Retry-After"))
	}
	var comments int
	dm := func() string {
		id := b.id("create")
		b.post(t, map[string]any{"id": id, "type": "Create", "actor": dan, "to": []string{aliceURI},
			"object": map[string]any{"id": b.id("note"), "type": "Note", "attributedTo": dan, "content": "psst",
				"to": []string{aliceURI}}})
		return id
	}
	first := dm()
	b.waitItems(t, alice, 1)
	ev, err := s.next(&comments)
	if err != nil {
		t.Fatal(err)
	}
	var add struct {
		Type   string `json:"type"`
		Target string `json:"target"`
		Object struct {
			ID   string `json:"id"`
			Type string `json:"type"`
		} `json:"object"`
	}
	if err := json.Unmarshal([]byte(ev.data), &add); err != nil {
		t.Fatalf("event %q: %v", ev.data, err)
	}
	if ev.id != "1" || add.Type != "Add" || add.Target != aliceURI+"/inbox" || add.Object.ID != first || add.Object.Type != "Create" {
		t.Errorf("first event: id %q %s", ev.id, ev.data)
	}
	s.close()
	// Missed while away: three items, one an Undo.
	missed := []string{dm()}
	b.waitItems(t, alice, 2)
	missed = append(missed, dm())
	b.waitItems(t, alice, 3)
	undo := b.id("undo")
	b.post(t, map[string]any{"id": undo, "type": "Undo", "actor": dan, "to": []string{aliceURI},
		"object": map[string]any{"id": missed[0], "type": "Create", "actor": dan}})
	b.waitItems(t, alice, 4)
	// The closed stream's place is free once its handler has returned.
	var s2 *sse
	deadline := time.Now().Add(30 * time.Second)
	for s2 == nil {
		var resp *http.Response
		s2, resp = openStream(t, ctx, streamURL, tok, ev.id)
		if s2 == nil {
			if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("reconnect: %d", resp.StatusCode)
			}
			resp.Body.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}
	defer s2.close()
	var got []event
	for range 3 {
		ev, err := s2.next(&comments)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	if got[0].id != "2" || got[1].id != "3" || got[2].id != "4" {
		t.Errorf("resumed ids: %v", got)
	}
	var remove struct {
		Type, Object, Target string
	}
	if err := json.Unmarshal([]byte(got[2].data), &remove); err != nil || remove.Type != "Remove" ||
		remove.Object != missed[0] || remove.Target != aliceURI+"/inbox" {
		t.Errorf("the Undo's event: %s (%v)", got[2].data, err)
	}
	// Idle again: keep-alive comments only, nothing twice.
	for n := 0; n < 2; {
		line, err := s2.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(line, ":"):
			n++
		case strings.TrimSpace(line) != "":
			t.Fatalf("idle stream sent %q", line)
		}
	}
}

// TestStreamSeesOtherProcesses: a stream served by one process sees the
// items another process records. On PostgreSQL the recording transaction
// announces itself and the stream's process, listening, wakes at once (the
// stream's poll is an hour); on SQLite, whose processes share no signal,
// the poll finds them.
func TestStreamSeesOtherProcesses(t *testing.T) {
	b := setup(t, app.Config{})
	alice, tok := b.actor(t, "alice", false)
	poll := time.Hour
	if !b.db.Postgres() {
		poll = 100 * time.Millisecond
	}
	// The other process: its own pools, listening, its own handler.
	other := storetest.Open(t, b.loc, storetest.Options{Synchronous: "NORMAL", Listen: true})
	h, err := app.New(app.Config{DB: other, Store: store.New(other, b.base, nil), Poll: poll})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r := mux.NewRouter()
	h.Register(r)
	srv := httptest.NewServer(r)
	defer srv.Close()
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	s, resp := openStream(t, ctx, srv.URL+"/users/alice/inbox/stream", tok, "0")
	if s == nil {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	defer s.close()
	for i := range 3 {
		id := fmt.Sprintf("https://remote.example/activities/%d", i)
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			return b.rec.RecordTx(b.ctx, tx, app.Item{ActorID: alice.ID, ActivityURI: id, Type: "Like", Kind: app.KindLike,
				Activity: json.RawMessage(fmt.Sprintf(`{"id":%q,"type":"Like"}`, id))})
		})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := s.next(nil)
		if err != nil {
			t.Fatal(err)
		}
		if ev.id != fmt.Sprint(i+1) || !strings.Contains(ev.data, id) {
			t.Errorf("event %d: %+v", i, ev)
		}
	}
}

// TestRecordOnce: RecordTx gives each item its actor's next seq and runs
// the hooks on it in the transaction; an activity already in the actor's
// view is not recorded again (no seq taken, no hook); a hook's error rolls
// the whole transaction back.
func TestRecordOnce(t *testing.T) {
	b := setup(t, app.Config{})
	alice, _ := b.actor(t, "alice", false)
	bob, _ := b.actor(t, "bob", false)
	var hooked []app.Item
	fail := false
	b.rec.AddHook(func(_ context.Context, tx *sql.Tx, it app.Item) error {
		if fail {
			return fmt.Errorf("hook refuses")
		}
		hooked = append(hooked, it)
		return nil
	})
	item := func(a *store.Actor, id string) app.Item {
		return app.Item{ActorID: a.ID, ActorName: a.Name, ActivityURI: id, Type: "Like", Kind: app.KindLike,
			Activity: json.RawMessage(`{"id":"` + id + `","type":"Like"}`)}
	}
	record := func(items ...app.Item) ([]app.Item, error) {
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error { return b.rec.RecordTx(b.ctx, tx, items...) })
		return items, err
	}
	got, err := record(item(bob, "https://r.example/1"), item(alice, "https://r.example/1"), item(alice, "https://r.example/2"))
	if err != nil {
		t.Fatal(err)
	}
	// The hooks run in actor order, each item with its seq.
	if got[0].Seq != 1 || got[1].Seq != 1 || got[2].Seq != 2 || len(hooked) != 3 ||
		hooked[0].ActorName != "alice" || hooked[1].Seq != 2 || hooked[2].ActorName != "bob" {
		t.Fatalf("seqs %d %d %d, hooked %+v", got[0].Seq, got[1].Seq, got[2].Seq, hooked)
	}
	got, err = record(item(alice, "https://r.example/2"), item(alice, "https://r.example/3"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq != 0 || got[1].Seq != 3 || len(hooked) != 4 {
		t.Errorf("again: seqs %d %d, %d hooked", got[0].Seq, got[1].Seq, len(hooked))
	}
	fail = true
	if _, err := record(item(alice, "https://r.example/4")); err == nil {
		t.Error("a hook's error did not fail the transaction")
	}
	var n, counter int
	if err := b.db.Read.QueryRow(`SELECT COUNT(*), (SELECT seq FROM app_inbox_counters WHERE actor_id = ?)
		FROM app_inbox_items WHERE actor_id = ?`, alice.ID, alice.ID).Scan(&n, &counter); err != nil {
		t.Fatal(err)
	}
	if n != 3 || counter != 3 {
		t.Errorf("alice has %d items, counter %d; want 3 and 3", n, counter)
	}
}

// TestInboxQueryErrors: a bad query parameter is 400 with a message naming
// it; max_id with min_id, an empty type= and page=banana are not passed
// over.
func TestInboxQueryErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, app.Config{})
	_, tok := b.actor(t, "alice", false)
	inboxURL := b.base + "/users/alice/inbox"
	for _, tc := range []struct{ query, names string }{
		{"?page=true&max_id=5&min_id=2", "max_id and min_id"},
		{"?page=true&max_id=x", "max_id"},
		{"?page=true&min_id=-1", "min_id"},
		{"?page=true&max_id=", "max_id"},
		{"?page=true&type=", "type"},
		{"?page=true&type=,", "type"},
		{"?page=true&type=Not%20a%20type", "type"},
		{"?page=banana", "page"},
		{"?page=true&notifications=maybe", "notifications"},
	} {
		resp, body := get(t, inboxURL+tc.query, tok)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || !strings.HasPrefix(e.Error, tc.names) {
			t.Errorf("%s: %d %s, want 400 naming %s first", tc.query, resp.StatusCode, body, tc.names)
		}
	}
	if resp, body := get(t, inboxURL+"?page=true&max_id=5", tok); resp.StatusCode != http.StatusOK {
		t.Fatalf("a good query: %d %s", resp.StatusCode, body)
	}
}
