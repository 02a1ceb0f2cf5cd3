package delivery_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
)

// publishRig is a courier server (package server's handler on loopback)
// over the bundle's store, beside its delivery service and remote peers:
// what a client posts is read back from /objects/... and from the bytes
// a peer verified.
type publishRig struct {
	*bundle
	srv   *httptest.Server
	alice *store.Actor
	token string
	// follower is a remote with a follower of alice; other is a remote whose
	// actors alice mentions without their following her.
	follower, other *remote
	// wf serves WebFinger for other's actors.
	wf *httptest.Server
}

func newPublishRig(t *testing.T) *publishRig {
	t.Helper()
	b := setup(t)
	r := &publishRig{bundle: b}
	var err error
	r.alice, r.token, err = b.st.CreateActor(b.ctx, store.NewActor{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	b.trustKey(r.alice)
	r.follower = newRemote(t, b.keys, b.clock, true)
	r.follower.follow(b, r.alice, "f1")
	r.other = newRemote(t, b.keys, b.clock, false)
	r.wf = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, host, err := activitypub.ParseWebFingerResource(req.URL.Query().Get("resource"))
		if err != nil || req.URL.Path != "/.well-known/webfinger" || host != r.wfHost() || user == "gone" {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", activitypub.JRDContentType)
		_ = json.NewEncoder(w).Encode(activitypub.NewWebFinger(user, host, r.other.actorURL(user), ""))
	}))
	t.Cleanup(r.wf.Close)
	client := activitypub.NewClient(activitypub.ClientOptions{AllowPrivate: true, Timeout: 10 * time.Second})
	s, err := server.New(server.Config{
		Store: b.st, AllowPrivateAddresses: true, PageSize: 2,
		Mentions: func(ctx context.Context, user, host string) (string, error) {
			return activitypub.WebFinger(ctx, client, "http", user, host)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(s.Handler())
	t.Cleanup(r.srv.Close)
	return r
}

func (r *publishRig) wfHost() string { return strings.TrimPrefix(r.wf.URL, "http://") }

// post sends body to alice's outbox and returns the status and the answer.
func (r *publishRig) post(t *testing.T, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/users/alice/outbox", bytes.NewReader(b))
	req.Header.Set("Content-Type", activitypub.ContentType)
	req.Header.Set("Authorization", "Bearer "+r.token)
	return r.do(t, req)
}

func (r *publishRig) do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	res, err := r.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, res.StatusCode, body)
	}
	return res.StatusCode, m
}

// get reads a courier URL (its base is the store's) from the test server.
func (r *publishRig) get(t *testing.T, id string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+strings.TrimPrefix(id, baseURL), nil)
	req.Header.Set("Accept", activitypub.ContentType)
	req.Header.Set("Authorization", "Bearer "+r.token) // the author may read what is not public
	return r.do(t, req)
}

// delivered waits until rm has verified a POST of the activity id and
// returns it decoded.
func (r *publishRig) delivered(t *testing.T, rm *remote, id string) map[string]any {
	t.Helper()
	var got []byte
	r.waitTicking("delivery of "+id+" to "+rm.URL(), func() bool {
		for _, rc := range rm.received() {
			if rc.ActivityID == id {
				got = rc.Body
				return true
			}
		}
		return false
	})
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(got))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// holds reports where got lacks what want holds: every key of a map with a
// value that holds want's, lists element by element; numbers compare by
// their text. Server additions (an href, a type) are allowed.
func holds(got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return "not an object"
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return "lacks " + k
			}
			if why := holds(gv, wv); why != "" {
				return k + ": " + why
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return "list differs"
		}
		for i := range w {
			if why := holds(g[i], w[i]); why != "" {
				return why
			}
		}
		return ""
	}
	if !reflect.DeepEqual(normal(got), normal(want)) {
		return "differs"
	}
	return ""
}

func normal(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// decoded returns v through JSON with numbers kept as json.Number.
func decoded(t *testing.T, v any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(v)
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// withoutServerKeys returns a client object without what the server sets
// over it (and without @context, which is compared on its own).
func withoutServerKeys(m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		switch k {
		case "id", "@context", "to", "cc", "published", "updated", "attributedTo":
		default:
			out[k] = v
		}
	}
	return out
}

// contextHas reports whether a JSON-LD @context holds entry.
func contextHas(ctx any, entry any) bool {
	for _, e := range list(ctx) {
		if holds(e, entry) == "" && holds(entry, e) == "" {
			return true
		}
	}
	return false
}

func list(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func strs(v any) []string {
	var out []string
	for _, e := range list(v) {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func has(l []string, v string) bool {
	for _, e := range l {
		if e == v {
			return true
		}
	}
	return false
}

// TestPublishRoundTrip posts one object of every type with every property
// courier carries, and checks each is answered 201, served at /objects/...
// and delivered (the bytes a peer verified) with everything the client sent.
func TestPublishRoundTrip(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	followers := baseURL + "/users/alice/followers"
	mentioned := r.other.actorURL("m1")
	// A local actor mentioned stays in cc; the fan-out POSTs nothing for it.
	bob, _, err := r.st.CreateActor(r.ctx, store.NewActor{Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	review := map[string]any{"rev": "https://review.example/ns#", "Review": "rev:Review", "rating": "rev:rating"}
	image := map[string]any{
		"type": "Image", "url": "https://media.example/cat.jpg", "mediaType": "image/jpeg", "name": "a cat asleep",
		"width": 1200, "height": 800, "blurhash": "LEHV6nWB2yk8pyo0adR*.7kCMdnj", "focalPoint": []any{-0.25, 0.5},
	}
	cases := []struct {
		name string
		obj  map[string]any
		// also is a remote (besides the follower's) the Create must reach.
		also *remote
		// check looks at the delivered object further.
		check func(t *testing.T, obj map[string]any)
	}{
		{name: "Note with mentions, hashtags, an image and an emoji", also: r.other, obj: map[string]any{
			"type": "Note", "content": "<p>hi @m1 @carol #Courier</p>", "summary": "cw", "sensitive": true,
			"contentMap": map[string]any{"en": "<p>hi @m1 @carol #Courier</p>"},
			"to":         []any{activitypub.Public}, "cc": []any{followers},
			"tag": []any{
				map[string]any{"type": "Mention", "href": mentioned, "name": "@m1@" + r.other.Host()},
				map[string]any{"type": "Mention", "name": "@carol@" + r.wfHost()},
				map[string]any{"type": "Mention", "href": bob.URI},
				map[string]any{"type": "Hashtag", "name": "#Courier"},
				map[string]any{"type": "Emoji", "name": ":blob:", "icon": map[string]any{"type": "Image", "url": "https://media.example/blob.png"}},
			},
			"attachment": []any{image},
		}, check: func(t *testing.T, obj map[string]any) {
			cc := strs(obj["cc"])
			if !has(cc, mentioned) || !has(cc, r.other.actorURL("carol")) || !has(cc, followers) || !has(cc, bob.URI) {
				t.Errorf("mentioned actors not in cc: %v", cc)
			}
			tags := list(obj["tag"])
			if h, _ := tags[1].(map[string]any)["href"].(string); h != r.other.actorURL("carol") {
				t.Errorf("mention by name resolved to %q", h)
			}
			if h, _ := tags[3].(map[string]any)["href"].(string); h != baseURL+"/tags/courier" {
				t.Errorf("hashtag href %q", h)
			}
		}},
		{name: "Article with its own url", obj: map[string]any{
			"type": "Article", "name": "On delivery", "content": "<p>long</p>", "summary": "about it",
			"url": "https://blog.example/posts/on-delivery", "to": []any{activitypub.Public},
			"image": map[string]any{"type": "Image", "url": "https://blog.example/cover.png"},
		}},
		{name: "Page", obj: map[string]any{"type": "Page", "name": "About", "content": "<p>us</p>", "to": []any{activitypub.Public}}},
		{name: "Event", obj: map[string]any{
			"type": "Event", "name": "Meetup", "startTime": "2026-12-24T18:00:00Z", "endTime": "2026-12-24T21:00:00Z",
			"location": map[string]any{"type": "Place", "name": "Town hall", "latitude": 48.85, "longitude": 2.35},
			"to":       []any{activitypub.Public},
		}},
		{name: "Image", obj: map[string]any{
			"type": "Image", "name": "sunset", "to": []any{activitypub.Public},
			"url": []any{map[string]any{"type": "Link", "href": "https://media.example/sunset.jpg", "mediaType": "image/jpeg"}},
		}},
		{name: "Video", obj: map[string]any{"type": "Video", "name": "clip", "duration": "PT2M", "to": []any{followers},
			"url": "https://media.example/clip.mp4"}},
		{name: "Audio", obj: map[string]any{"type": "Audio", "name": "song", "to": []any{activitypub.Public},
			"url": "https://media.example/song.ogg", "attachment": map[string]any{"url": "https://media.example/song.ogg", "mediaType": "audio/ogg"}}},
		{name: "Review of its own vocabulary", obj: map[string]any{
			"@context": []any{activitypub.ActivityStreams, review},
			"type":     "Review", "name": "Five stars", "content": "<p>great</p>", "rating": 4.5, "to": []any{activitypub.Public},
		}, check: func(t *testing.T, obj map[string]any) {
			if n, _ := obj["rating"].(json.Number); n.String() != "4.5" {
				t.Errorf("rating %v", obj["rating"])
			}
		}},
		{name: "Question", obj: map[string]any{
			"type": "Question", "content": "<p>tea or coffee?</p>", "endTime": "2026-12-31T00:00:00Z", "to": []any{activitypub.Public},
			"oneOf": []any{map[string]any{"type": "Note", "name": "tea"}, map[string]any{"type": "Note", "name": "coffee"}},
		}, check: func(t *testing.T, obj map[string]any) {
			for _, o := range list(obj["oneOf"]) {
				rep, _ := o.(map[string]any)["replies"].(map[string]any)
				if n, _ := rep["totalItems"].(json.Number); n.String() != "0" {
					t.Errorf("option %v", o)
				}
			}
			if n, _ := obj["votersCount"].(json.Number); n.String() != "0" {
				t.Errorf("votersCount %v", obj["votersCount"])
			}
		}},
		{name: "quote post", obj: map[string]any{
			"type": "Note", "content": "<p>RE: look</p>", "to": []any{activitypub.Public},
			"quoteUrl": "https://remote.example/notes/1",
		}, check: func(t *testing.T, obj map[string]any) {
			for _, k := range []string{"quote", "quoteUrl", "_misskey_quote"} {
				if obj[k] != "https://remote.example/notes/1" {
					t.Errorf("%s: %v", k, obj[k])
				}
			}
		}},
	}
	r.startWorker(4)
	for _, tc := range cases {
		if _, ok := tc.obj["cc"]; !ok {
			tc.obj["cc"] = []any{followers}
		}
		t.Run(tc.name, func(t *testing.T) {
			for _, wrapped := range []bool{false, true} {
				body := tc.obj
				if wrapped {
					body = map[string]any{"@context": activitypub.ActivityStreams, "type": "Create", "object": tc.obj}
				}
				status, act := r.post(t, body)
				if status != http.StatusCreated {
					t.Fatalf("posted: %d %v", status, act)
				}
				want := decoded(t, withoutServerKeys(tc.obj))
				answered, _ := act["object"].(map[string]any)
				if why := holds(answered, want); why != "" {
					t.Fatalf("answered object %s: %v", why, answered)
				}
				id, _ := answered["id"].(string)
				status, served := r.get(t, id)
				if status != http.StatusOK {
					t.Fatalf("served: %d %v", status, served)
				}
				if why := holds(served, want); why != "" {
					t.Fatalf("served object %s: %v", why, served)
				}
				if served["attributedTo"] != r.alice.URI || served["published"] == nil || !contextHas(served["@context"], activitypub.ActivityStreams) {
					t.Fatalf("served object's server properties: %v", served)
				}
				got := r.delivered(t, r.follower, act["id"].(string))
				obj, _ := got["object"].(map[string]any)
				if why := holds(obj, want); why != "" {
					t.Fatalf("delivered object %s: %s", why, must(json.Marshal(got)))
				}
				if c, ok := tc.obj["@context"]; ok {
					for _, e := range list(c)[1:] {
						if !contextHas(got["@context"], e) || !contextHas(served["@context"], e) {
							t.Fatalf("context entry %v lost: delivered %v, served %v", e, got["@context"], served["@context"])
						}
					}
				}
				if tc.also != nil {
					if why := holds(r.delivered(t, tc.also, act["id"].(string))["object"], want); why != "" {
						t.Fatalf("delivered to the mentioned actors' server: %s", why)
					}
				}
				if tc.check != nil {
					tc.check(t, obj)
					tc.check(t, served)
				}
			}
		})
	}
	r.noLocalDelivery(t)
}

func must(b []byte, _ error) string { return string(b) }

// noLocalDelivery checks that no delivery was made to a local inbox.
func (r *publishRig) noLocalDelivery(t *testing.T) {
	t.Helper()
	for inbox := range r.deliveryRows() {
		if strings.HasPrefix(inbox, baseURL) {
			t.Fatalf("a delivery to the local inbox %s", inbox)
		}
	}
}

// TestPublishUpdateAndDeleteEveryType updates and deletes an object of each
// type: the Update replaces the client's properties and keeps the server's
// (published, the audience), sets updated, and reaches the followers; the
// Delete serves a Tombstone of the former type and reaches them too.
func TestPublishUpdateAndDeleteEveryType(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	r.startWorker(4)
	for _, typ := range []string{"Note", "Article", "Page", "Event", "Image", "Video", "Audio", "Question", "Review"} {
		obj := map[string]any{"type": typ, "content": "<p>first</p>", "name": "first", "to": []any{activitypub.Public},
			"cc": []any{baseURL + "/users/alice/followers"}}
		if typ == "Review" {
			obj["@context"] = []any{activitypub.ActivityStreams, map[string]any{"Review": "https://review.example/ns#Review"}}
		}
		if typ == "Question" {
			obj["anyOf"] = []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}
		}
		status, act := r.post(t, obj)
		if status != http.StatusCreated {
			t.Fatalf("%s: %d %v", typ, status, act)
		}
		id := act["object"].(map[string]any)["id"].(string)
		_, before := r.get(t, id)
		r.clock.Advance(time.Minute)
		upd := map[string]any{"id": id, "content": "<p>second</p>", "name": "second", "tag": []any{map[string]any{"type": "Hashtag", "name": "#edited"}}}
		if typ != "Note" {
			upd["type"] = typ
		}
		if typ == "Review" {
			upd["@context"] = obj["@context"]
		}
		if typ == "Question" {
			upd["anyOf"] = obj["anyOf"]
		}
		status, uact := r.post(t, map[string]any{"type": "Update", "object": upd})
		if status != http.StatusCreated {
			t.Fatalf("%s update: %d %v", typ, status, uact)
		}
		status, served := r.get(t, id)
		if status != http.StatusOK || served["content"] != "<p>second</p>" || served["name"] != "second" ||
			served["published"] != before["published"] || served["updated"] == nil || served["type"] != typ ||
			!has(strs(served["to"]), activitypub.Public) {
			t.Fatalf("%s updated: %d %v", typ, status, served)
		}
		got := r.delivered(t, r.follower, uact["id"].(string))
		if o := got["object"].(map[string]any); got["type"] != "Update" || o["content"] != "<p>second</p>" || o["updated"] == nil {
			t.Fatalf("%s update delivered: %v", typ, got)
		}
		// Changing the type is refused.
		bad := map[string]any{"id": id, "type": "Tombstone", "content": "x"}
		if status, m := r.post(t, map[string]any{"type": "Update", "object": bad}); status != http.StatusUnprocessableEntity {
			t.Fatalf("%s: type change answered %d %v", typ, status, m)
		}
		status, dact := r.post(t, map[string]any{"type": "Delete", "object": id})
		if status != http.StatusCreated {
			t.Fatalf("%s delete: %d %v", typ, status, dact)
		}
		status, gone := r.get(t, id)
		if status != http.StatusGone || gone["type"] != "Tombstone" || gone["formerType"] != typ {
			t.Fatalf("%s deleted: %d %v", typ, status, gone)
		}
		got = r.delivered(t, r.follower, dact["id"].(string))
		if o := got["object"].(map[string]any); got["type"] != "Delete" || o["formerType"] != typ {
			t.Fatalf("%s delete delivered: %v", typ, got)
		}
	}
}

// TestPublishHashtagCollection: /tags/{name} lists the local public objects
// carrying the hashtag, newest first, paged by cursor; not other visibilities,
// not deleted objects, whatever case the tag was written in.
func TestPublishHashtagCollection(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	var public []string
	post := func(to any, tag string) string {
		status, act := r.post(t, map[string]any{"type": "Note", "content": "x", "to": to,
			"tag": map[string]any{"type": "Hashtag", "name": tag}})
		if status != http.StatusCreated {
			t.Fatalf("%d %v", status, act)
		}
		return act["object"].(map[string]any)["id"].(string)
	}
	for _, tag := range []string{"#Go", "go", "#GO"} {
		public = append(public, post(activitypub.Public, tag))
	}
	post(baseURL+"/users/alice/followers", "#go")
	post(r.other.actorURL("x"), "#go")
	post(activitypub.Public, "#other")
	deleted := post(activitypub.Public, "#go")
	if status, m := r.post(t, map[string]any{"type": "Delete", "object": deleted}); status != http.StatusCreated {
		t.Fatalf("delete: %d %v", status, m)
	}
	status, c := r.get(t, baseURL+"/tags/Go")
	if status != http.StatusOK || c["type"] != "OrderedCollection" || c["totalItems"] != json.Number("3") {
		t.Fatalf("collection: %d %v", status, c)
	}
	var seen []string
	next, _ := c["first"].(string)
	for next != "" {
		status, p := r.get(t, next)
		if status != http.StatusOK {
			t.Fatalf("page %s: %d %v", next, status, p)
		}
		for _, it := range list(p["orderedItems"]) {
			seen = append(seen, it.(map[string]any)["id"].(string))
		}
		next, _ = p["next"].(string)
	}
	want := []string{public[2], public[1], public[0]}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("tagged objects %v, want %v", seen, want)
	}
}

// TestPublishMentionLookupFailures: a mention whose name WebFinger does not
// know is refused by name (422); one whose server cannot be reached now is
// 503 with Retry-After; nothing is stored either way.
func TestPublishMentionLookupFailures(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	for _, tc := range []struct {
		name   string
		status int
	}{
		{"@gone@" + r.wfHost(), http.StatusUnprocessableEntity},
		{"@someone@127.0.0.1:1", http.StatusServiceUnavailable},
	} {
		b, _ := json.Marshal(map[string]any{"type": "Note", "content": "hi", "to": activitypub.Public,
			"tag": map[string]any{"type": "Mention", "name": tc.name}})
		req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/users/alice/outbox", bytes.NewReader(b))
		req.Header.Set("Content-Type", activitypub.ContentType)
		req.Header.Set("Authorization", "Bearer "+r.token)
		res, err := r.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || !strings.Contains(string(body), tc.name) {
			t.Fatalf("%s: %d %s, want %d naming it", tc.name, res.StatusCode, body, tc.status)
		}
		if tc.status == http.StatusServiceUnavailable && res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: 503 without Retry-After", tc.name)
		}
	}
	var n int
	if err := r.db.Read.QueryRow(`SELECT COUNT(*) FROM objects`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d objects stored (%v)", n, err)
	}
}

// TestPublishHTTPAttachmentWhenPrivateAllowed: with
// --allow-private-addresses (tests on loopback) an attachment may be an
// http URL; a relative one is still refused.
func TestPublishHTTPAttachmentWhenPrivateAllowed(t *testing.T) {
	t.Parallel()
	r := newPublishRig(t)
	for _, tc := range []struct {
		url    string
		status int
	}{{"http://127.0.0.1:9/cat.png", http.StatusCreated}, {"cat.png", http.StatusUnprocessableEntity}} {
		status, m := r.post(t, map[string]any{"type": "Note", "content": "x", "to": activitypub.Public,
			"attachment": map[string]any{"type": "Image", "url": tc.url}})
		if status != tc.status {
			t.Fatalf("%s: %d %v", tc.url, status, m)
		}
	}
}
