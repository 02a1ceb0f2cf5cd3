package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestC2SServerPropertiesUnderAnySpelling: what the server sets or vouches
// for (the object's id and type, its author, times and audience, what makes
// an actor or a key) is refused with 422 naming the client's spelling,
// however it is spelt: a prefixed term, the full IRI, @id or @type, a
// client term standing for it, a client context redefining the term. A
// context this server does not ship is refused by its URL. Nothing is
// stored.
func TestC2SServerPropertiesUnderAnySpelling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob, _ := b.actor(t, "bob")
	followers := b.alice.URI + "/followers"
	rev := map[string]any{"rev": "https://review.example/ns#"}
	obj := func(ctx []any, kv ...any) map[string]any {
		m := map[string]any{"type": "Note", "content": "x", "to": []any{activitypub.Public}}
		if ctx != nil {
			m["@context"] = append([]any{activitypub.ActivityStreams}, ctx...)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	key := map[string]any{"id": b.alice.URI + "#forged", "owner": b.alice.URI, "publicKeyPem": "-----BEGIN PUBLIC KEY-----"}
	for _, tc := range []struct {
		name  string
		body  map[string]any
		names string
	}{
		{"type as:Person", obj([]any{rev}, "type", "as:Person"), "as:Person"},
		{"type as a full IRI", obj([]any{rev}, "type", "https://www.w3.org/ns/activitystreams#Person"), "activitystreams#Person"},
		{"type as:Service over http", obj([]any{rev}, "type", "http://www.w3.org/ns/activitystreams#Service"), "activitystreams#Service"},
		{"client term for as:Person", obj([]any{map[string]any{"Persona": "as:Person"}}, "type", "Persona"), "Persona"},
		{"client term for sec:Key", obj([]any{map[string]any{"sec": "https://w3id.org/security#", "Badge": "sec:Key"}}, "type", "Badge"), "Badge"},
		{"type as:Tombstone", obj([]any{rev}, "type", "as:Tombstone"), "as:Tombstone"},
		{"@id", obj(nil, "@id", b.base+"/users/admin"), `"@id"`},
		{"@type", obj(nil, "@type", "Person"), `"@type"`},
		{"client term for @type", obj([]any{map[string]any{"kind": "@type"}}, "kind", "Person"), `"kind"`},
		{"as:attributedTo", obj(nil, "as:attributedTo", bob.URI), `"as:attributedTo"`},
		{"attributedTo as a full IRI", obj(nil, "https://www.w3.org/ns/activitystreams#attributedTo", bob.URI), "activitystreams#attributedTo"},
		{"client term for attributedTo", obj([]any{map[string]any{"by": map[string]any{"@id": "as:attributedTo", "@type": "@id"}}}, "by", bob.URI), `"by"`},
		{"as:cc Public on a followers-only note", obj(nil, "to", []any{followers}, "as:cc", "as:Public"), `"as:cc"`},
		{"client term for cc", obj([]any{map[string]any{"also": "as:cc"}}, "to", []any{followers}, "also", activitypub.Public), `"also"`},
		{"as:published", obj(nil, "as:published", "2099-01-01T00:00:00Z"), `"as:published"`},
		{"as:actor", obj(nil, "as:actor", bob.URI), `"as:actor"`},
		{"as:audience", obj(nil, "as:audience", "https://remote.test/groups/g"), `"as:audience"`},
		{"context redefines attributedTo", obj([]any{map[string]any{"attributedTo": "https://evil.example/ns#by"}}), `"attributedTo"`},
		{"context redefines cc", obj([]any{map[string]any{"cc": map[string]any{"@id": "https://evil.example/ns#cc", "@type": "@id"}}}), `"cc"`},
		{"context redefines the as prefix", obj([]any{map[string]any{"as": "https://evil.example/ns#"}}), `"as"`},
		{"context redefines sensitive", obj([]any{map[string]any{"sensitive": "https://evil.example/ns#nsfw"}}), `"sensitive"`},
		{"context maps publicKey to null", obj([]any{map[string]any{"publicKey": nil}}, "publicKey", key), `"publicKey"`},
		{"context sets @vocab", obj([]any{map[string]any{"@vocab": "https://www.w3.org/ns/activitystreams#"}}), "@vocab"},
		{"a term with a context of its own", obj([]any{map[string]any{"Review": map[string]any{"@id": "https://review.example/ns#Review",
			"@context": map[string]any{"by": "as:attributedTo"}}}}), `"Review"`},
		{"a remote context", obj([]any{"https://contexts.example/ctx.jsonld"}), "https://contexts.example/ctx.jsonld"},
		{"inbox", obj(nil, "inbox", b.base+"/users/alice/inbox"), `"inbox"`},
		{"preferredUsername", obj(nil, "preferredUsername", "admin"), `"preferredUsername"`},
		{"publicKey without the security context", obj(nil, "publicKey", key), `"publicKey"`},
		{"publicKey with the security context", obj([]any{activitypub.SecurityContext}, "publicKey", key), `"publicKey"`},
		{"sec:publicKeyPem", obj([]any{map[string]any{"sec": "https://w3id.org/security#"}}, "sec:publicKeyPem", "-----BEGIN PUBLIC KEY-----"), `"sec:publicKeyPem"`},
		{"an embedded key", obj(nil, "attachment", map[string]any{"type": "Document", "url": "https://media.example/k.pem",
			"publicKey": key}), "publicKey"},
		{"an embedded Person", obj(nil, "attachment", map[string]any{"type": "Person", "url": "https://media.example/p"}), "Person"},
		{"an embedded object of this server", obj(nil, "inReplyTo", map[string]any{"id": b.base + "/objects/1", "type": "Note",
			"content": "forged", "attributedTo": bob.URI}), b.base + "/objects/1"},
		{"an inner @context", obj(nil, "attachment", map[string]any{"@context": map[string]any{"by": "as:attributedTo"},
			"type": "Document", "url": "https://media.example/a.png"}), "@context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.count(t, `SELECT COUNT(*) FROM objects`)
			for _, wrapped := range []bool{false, true} {
				body := tc.body
				if wrapped {
					body = map[string]any{"type": "Create", "object": tc.body}
				}
				r := b.post(t, "alice", b.token, body)
				wantStatus(t, r, http.StatusUnprocessableEntity)
				var e struct {
					Error string `json:"error"`
				}
				if err := json.Unmarshal(r.Body, &e); err != nil || !strings.Contains(e.Error, tc.names) {
					t.Fatalf("error %q does not name %s", e.Error, tc.names)
				}
			}
			if after := b.count(t, `SELECT COUNT(*) FROM objects`); after != before {
				t.Fatalf("objects %d -> %d", before, after)
			}
		})
	}
}

// TestC2SClientVocabularyKept: terms of the client's own namespace, a
// context restating ActivityStreams, security or courier's terms as they
// are, references to this server's objects by id, and a note as Mastodon
// writes it (its context, ostatus terms) are published and served as sent.
func TestC2SClientVocabularyKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	note := b.note(t, "alice", b.token, "mine")
	for _, body := range []map[string]any{
		{"@context": []any{activitypub.ActivityStreams, map[string]any{"rev": "https://review.example/ns#", "Review": "rev:Review",
			"rating": "rev:rating", "reviewer": map[string]any{"@id": "rev:reviewer", "@type": "@id"}}},
			"type": "Review", "content": "good", "rating": 4.5, "reviewer": "https://remote.test/users/bob", "to": activitypub.Public},
		{"@context": []any{activitypub.ActivityStreams, activitypub.SecurityContext, map[string]any{"sensitive": "as:sensitive",
			"Hashtag": "as:Hashtag", "toot": "http://joinmastodon.org/ns#", "blurhash": "toot:blurhash",
			"attributedTo": map[string]any{"@id": "as:attributedTo", "@type": "@id"}, "schema": "http://schema.org#"}},
			"type": "Note", "content": "hi", "sensitive": false, "inReplyTo": note, "quote": note, "to": activitypub.Public},
		{"type": "Note", "content": "re", "inReplyTo": map[string]any{"id": note}, "to": activitypub.Public,
			"tag": map[string]any{"type": "Mention", "href": b.alice.URI}},
		mastodonNote(t),
	} {
		r := b.post(t, "alice", b.token, body)
		act := b.created(t, r, "Create")
		served := b.get(t, act.ObjectID, "Accept", apJSON).json(t)
		for k, v := range body {
			if k == "@context" || k == "to" || k == "inReplyTo" || k == "tag" {
				continue
			}
			if got, want := string(mustJSON(t, served[k])), string(mustJSON(t, v)); got != want {
				t.Errorf("%s served as %s, sent %s", k, got, want)
			}
		}
	}
}

// mastodonNote is a note Mastodon published (testdata/mastodon/note_1.json),
// its context and terms as sent, without what a server sets (id, author,
// times, audience, replies) and its tags and reply (which name objects a
// client would resolve).
func mastodonNote(t *testing.T) map[string]any {
	t.Helper()
	m := fixture(t, "mastodon/note_1.json")
	for _, k := range []string{"id", "attributedTo", "published", "replies", "cc", "tag", "inReplyTo", "inReplyToAtomUri"} {
		delete(m, k)
	}
	m["to"] = activitypub.Public
	return m
}

// TestCheckLDTypesAndNames: the checker alone, on spellings of types and
// of server-set properties, several checks at once.
func TestCheckLDTypesAndNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ctx   []any
		typ   string
		props map[string]any
		ok    bool
	}{
		{nil, "Note", map[string]any{"content": "x"}, true},
		{nil, "as:Note", map[string]any{"content": "x"}, true},
		{nil, "as:Person", nil, false},
		{nil, "as:Create", nil, false},
		{nil, "OrderedCollection", nil, false},
		{[]any{map[string]any{"Key": "https://review.example/ns#Key"}}, "Key", nil, true},
		{[]any{map[string]any{"K": "https://w3id.org/security#Key"}}, "K", nil, false},
		{nil, "Note", map[string]any{"as:likes": map[string]any{"totalItems": 9}}, false},
		{nil, "Note", map[string]any{"@reverse": map[string]any{"as:attributedTo": "https://a.test/u"}}, false},
		{nil, "Note", map[string]any{"@graph": []any{map[string]any{"id": "https://a.test/u", "type": "Person"}}}, false},
	} {
		// At once: the parsed ActivityStreams context is shared.
		t.Run(tc.typ, func(t *testing.T) {
			t.Parallel()
			err := checkLD("https://courier.test", tc.ctx, tc.typ, tc.props)
			if (err == nil) != tc.ok {
				t.Errorf("%v %s %v: %v", tc.ctx, tc.typ, tc.props, err)
			}
			if err != nil && store.ErrorCode(err) != store.EUNPROCESSABLE {
				t.Errorf("%s: %v is not 422", tc.typ, err)
			}
		})
	}
}

// FuzzCheckLD runs the checker on whatever a client sends as its object,
// without the guard that turns a panic into a 422: it never panics, refuses
// only with 422, and an object it accepts has, at its top, no key that
// plain-JSON readers take for the id, the type or what makes an actor or a
// key (the view of peers that read no JSON-LD).
func FuzzCheckLD(f *testing.F) {
	for _, s := range []string{
		`{"type":"Note","content":"x"}`,
		`{"@context":["https://www.w3.org/ns/activitystreams",{"rev":"https://review.example/ns#","Review":"rev:Review","rating":"rev:rating"}],"type":"Review","rating":4.5}`,
		`{"@context":["https://www.w3.org/ns/activitystreams","https://w3id.org/security/v1"],"type":"Note","publicKey":{"id":"https://a.test/k","publicKeyPem":"x"}}`,
		`{"@context":[{"by":"as:attributedTo"}],"type":"Note","by":"https://a.test/u"}`,
		`{"@context":[{"kind":"@type"}],"type":"Note","kind":"Person"}`,
		`{"@context":[{"attributedTo":null}],"type":"Note","attributedTo":"x"}`,
		`{"type":"Note","@id":"https://courier.test/users/a","as:cc":"as:Public","https://www.w3.org/ns/activitystreams#published":"2099"}`,
		`{"type":"Note","attachment":{"type":"Person","inbox":"https://a.test/i"},"inReplyTo":{"id":"https://courier.test/objects/1","content":"x"}}`,
		`{"type":"Note","@reverse":{"as:attributedTo":"https://a.test/u"},"@graph":[{"type":"Person"}]}`,
		`{"@context":[{"@vocab":"https://www.w3.org/ns/activitystreams#","x":{"@id":"as:x","@context":{"y":"as:y"}}}],"type":"Note","@foo":1}`,
		`{"@context":"https://contexts.example/c","type":"Note","content":{"@value":"x","@language":"en"},"tag":[{"@list":[1,2]}]}`,
	} {
		f.Add([]byte(s))
	}
	plainNames := append(append([]string{"@id", "@type", "id"}, identityProperties...), "as:inbox", "sec:publicKey")
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeDoc(data)
		if err != nil {
			return
		}
		ctx, err := clientContext(m["@context"], nil)
		if err != nil {
			return
		}
		typ, _ := m["type"].(string)
		props := make(map[string]any, len(m))
		for k, v := range m {
			if !slices.Contains(serverProperties, k) && k != "type" {
				props[k] = v
			}
		}
		err = checkObjectLD("https://courier.test", ctx, typ, props)
		if err != nil {
			if store.ErrorCode(err) != store.EUNPROCESSABLE {
				t.Fatalf("%v is not 422", err)
			}
			return
		}
		for _, k := range plainNames {
			if _, ok := props[k]; ok {
				t.Fatalf("accepted an object with %q: %s", k, data)
			}
		}
	})
}
