package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

func TestWebFinger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := strings.TrimPrefix(b.base, "http://")
	for _, tc := range []struct {
		resource string
		status   int
	}{
		{"acct:alice@" + host, 200},
		{"alice@" + host, 200},
		{"acct:ALICE@" + strings.ToUpper(host), 404}, // names are lower case
		{b.base + "/users/alice", 200},
		{"acct:nobody@" + host, 404},
		{"acct:alice@elsewhere.test", 404},
		{"https://elsewhere.test/users/alice", 404},
		{"https://" + host + "/users/alice", 404}, // another scheme is another origin
		{"acct:alice", 400},
		{"acct:@" + host, 400},
		{"mailto:alice@" + host, 400},
		{"", 400},
	} {
		r := b.do(t, http.MethodGet, "/.well-known/webfinger?resource="+url.QueryEscape(tc.resource), nil)
		if r.StatusCode != tc.status {
			t.Errorf("resource %q: status %d, want %d: %s", tc.resource, r.StatusCode, tc.status, r.Body)
			continue
		}
		if tc.status != 200 {
			if m := r.json(t); m["error"] == "" || m["error"] == nil {
				t.Errorf("resource %q: error body %s", tc.resource, r.Body)
			}
			continue
		}
		if ct := r.Header.Get("Content-Type"); ct != activitypub.JRDContentType {
			t.Errorf("content type %q", ct)
		}
		var jrd activitypub.JRD
		if err := json.Unmarshal(r.Body, &jrd); err != nil {
			t.Fatal(err)
		}
		if jrd.Subject != "acct:alice@"+host || jrd.Self() != b.alice.URI {
			t.Errorf("JRD %s", r.Body)
		}
		var self activitypub.Link
		for _, l := range jrd.Links {
			if l.Rel == "self" {
				self = l
			}
		}
		if self.Type != "application/activity+json" || self.Href != b.alice.URI {
			t.Errorf("self link %+v", self)
		}
	}
	// Mastodon checks that the actor fingers back: the actor's
	// preferredUsername and host give the same subject.
	actor := b.get(t, "/users/alice").json(t)
	back := b.do(t, http.MethodGet, "/.well-known/webfinger?resource="+url.QueryEscape("acct:"+actor["preferredUsername"].(string)+"@"+host), nil)
	wantStatus(t, back, http.StatusOK)
}

func TestHostMetaAndNodeInfo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hm := b.do(t, http.MethodGet, "/.well-known/host-meta", nil)
	wantStatus(t, hm, http.StatusOK)
	if !strings.HasPrefix(hm.Header.Get("Content-Type"), activitypub.XRDContentType) ||
		!bytes.Contains(hm.Body, []byte(`template="`+b.base+`/.well-known/webfinger?resource={uri}"`)) {
		t.Fatalf("host-meta %s %s", hm.Header.Get("Content-Type"), hm.Body)
	}
	links := b.do(t, http.MethodGet, "/.well-known/nodeinfo", nil).json(t)
	l := links["links"].([]any)[0].(map[string]any)
	if l["rel"] != activitypub.NodeInfoSchema21 || l["href"] != b.base+"/nodeinfo/2.1" {
		t.Fatalf("nodeinfo links %v", links)
	}
	b.note(t, "alice", b.token, "one")
	gone := b.note(t, "alice", b.token, "two")
	wantStatus(t, b.post(t, "alice", b.token, map[string]any{"type": "Delete", "object": gone}), http.StatusCreated)
	b.actor(t, "bob")
	r := b.do(t, http.MethodGet, "/nodeinfo/2.1", nil)
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != activitypub.NodeInfoContentType {
		t.Fatalf("content type %q", ct)
	}
	ni, err := activitypub.ParseNodeInfo(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ni.Version != "2.1" || ni.Software.Name != "courier" || ni.Software.Version != "1.2.3" ||
		strings.Join(ni.Protocols, ",") != "activitypub" || ni.Usage.Users.Total != 2 || ni.Usage.LocalPosts != 1 {
		t.Fatalf("nodeinfo %+v\n%s", ni, r.Body)
	}
}

func TestContentNegotiation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := func() error {
		summary := `<i>bio</i> & more`
		_, _, err := b.st.UpdateActor(context.Background(), "alice", store.ActorUpdate{Summary: &summary})
		return err
	}()
	if err != nil {
		t.Fatal(err)
	}
	noteID := b.note(t, "alice", b.token, `<p>Hi <script>alert("x")</script> &amp; bye</p>`)
	for _, path := range []string{"/users/alice", noteID} {
		for _, tc := range []struct {
			accept, ct string
		}{
			{"application/activity+json", apJSON},
			{activitypub.LDContentType, activitypub.LDContentType},
			{"application/ld+json", activitypub.LDContentType},
			{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html; charset=utf-8"},
			{"", apJSON},
			{"*/*", apJSON},
			{"application/json", apJSON},
			{"text/html;q=0, application/activity+json", apJSON},
		} {
			r := b.do(t, http.MethodGet, path, nil, "Accept", tc.accept)
			wantStatus(t, r, http.StatusOK)
			if ct := r.Header.Get("Content-Type"); ct != tc.ct {
				t.Errorf("%s with Accept %q: content type %q, want %q", path, tc.accept, ct, tc.ct)
			}
			if !strings.Contains(r.Header.Get("Vary"), "Accept") {
				t.Errorf("%s: no Vary: Accept", path)
			}
			if tc.ct != "text/html; charset=utf-8" {
				r.json(t)
				continue
			}
			page := string(r.Body)
			if strings.Contains(page, "<script") || strings.Contains(page, "<i>bio") {
				t.Errorf("%s: HTML page carries markup from content:\n%s", path, page)
			}
			if !strings.Contains(page, "<!doctype html>") || !strings.Contains(page, "ALICE") {
				t.Errorf("%s: page %s", path, page)
			}
		}
	}
	profile := string(b.do(t, http.MethodGet, "/users/alice", nil, "Accept", "text/html").Body)
	if !strings.Contains(profile, "bio &amp; more") || !strings.Contains(profile, "Hi alert(&#34;x&#34;) &amp; bye") ||
		!strings.Contains(profile, "@alice@") {
		t.Fatalf("profile page:\n%s", profile)
	}
	note := string(b.do(t, http.MethodGet, noteID, nil, "Accept", "text/html").Body)
	if !strings.Contains(note, "Hi alert(&#34;x&#34;) &amp; bye") || !strings.Contains(note, "0 likes") {
		t.Fatalf("note page:\n%s", note)
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"<p>a</p><p>b</p>":              "a\nb",
		"a<br>b<br/>c":                  "a\nb\nc",
		"<b>x</b> &amp; &lt;y&gt;":      "x & <y>",
		"unclosed <a href='x":           "unclosed",
		"no tags":                       "no tags",
		`<span class="h-card">@</span>`: "@",
	} {
		if got := plainText(in); got != want {
			t.Errorf("plainText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/nope", nil)
	wantStatus(t, r, http.StatusNotFound)
	r.json(t)
	r = b.do(t, http.MethodDelete, "/users/alice", nil)
	wantStatus(t, r, http.StatusMethodNotAllowed)
	if m := r.json(t); !strings.Contains(m["error"].(string), "DELETE") {
		t.Errorf("405 body %v", m)
	}
	if got := r.Header.Get("Allow"); got != "GET, HEAD" {
		t.Errorf("405 Allow %q, want GET, HEAD", got)
	}
}
