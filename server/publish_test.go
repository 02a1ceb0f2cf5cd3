package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestC2SRefusesWhatItCannotCarry: what courier cannot carry whole is
// refused with 422 and a message naming it, and nothing is stored.
func TestC2SRefusesWhatItCannotCarry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	note := b.note(t, "alice", b.token, "mine")
	pub := `"to": "as:Public"`
	for _, tc := range []struct {
		name, body, names string
		status            int
	}{
		{"bcc", `{"type": "Article", "content": "x", ` + pub + `, "bcc": "https://a.test/u"}`, "bcc", 422},
		{"embedded activity", `{"type": "Create", "object": {"type": "Like", "object": "https://a.test/n"}}`, "Like", 422},
		{"Create of an id", `{"type": "Create", "object": "https://a.test/n"}`, "embedded", 422},
		{"Create property", `{"type": "Create", "audience": "https://a.test/g", "object": {"type": "Note", "content": "x", ` + pub + `}}`, `"audience"`, 422},
		{"actor type", `{"type": "Person", "name": "x", ` + pub + `}`, "Person", 422},
		{"custom type without context", `{"type": "Review", "content": "x", ` + pub + `}`, "@context", 422},
		{"type list", `{"type": ["Note", "Review"], "content": "x", ` + pub + `}`, "type", 422},
		{"relative attachment", `{"type": "Note", "content": "x", ` + pub + `, "attachment": {"type": "Image", "url": "/cat.jpg"}}`, "/cat.jpg", 422},
		{"http attachment", `{"type": "Note", "content": "x", ` + pub + `, "attachment": {"type": "Image", "url": "http://m.test/cat.jpg"}}`, "https", 422},
		{"attachment without url", `{"type": "Note", "content": "x", ` + pub + `, "attachment": {"type": "Image", "name": "alt"}}`, "url", 422},
		{"attachment as a string", `{"type": "Note", "content": "x", ` + pub + `, "attachment": "https://m.test/cat.jpg"}`, "attachment", 422},
		{"bad width", `{"type": "Note", "content": "x", ` + pub + `, "attachment": {"url": "https://m.test/c.jpg", "width": "big"}}`, "width", 422},
		{"bad focalPoint", `{"type": "Note", "content": "x", ` + pub + `, "attachment": {"url": "https://m.test/c.jpg", "focalPoint": [1]}}`, "focalPoint", 422},
		{"hashtag without name", `{"type": "Note", "content": "x", ` + pub + `, "tag": {"type": "Hashtag"}}`, "Hashtag", 422},
		{"mention without href or name", `{"type": "Note", "content": "x", ` + pub + `, "tag": {"type": "Mention"}}`, "Mention", 422},
		{"mention of a remote name, no lookup", `{"type": "Note", "content": "x", ` + pub + `, "tag": {"type": "Mention", "name": "@bob@remote.test"}}`, "@bob@remote.test", 422},
		{"mention of an unknown local name", `{"type": "Note", "content": "x", ` + pub + `, "tag": {"type": "Mention", "name": "@nobody@` + strings.TrimPrefix(b.base, "http://") + `"}}`, "@nobody", 422},
		{"tag without type", `{"type": "Note", "content": "x", ` + pub + `, "tag": {"name": "x"}}`, "tag 0", 422},
		{"likes", `{"type": "Note", "content": "x", ` + pub + `, "likes": {"totalItems": 9}}`, "likes", 422},
		{"quotes disagree", `{"type": "Note", "content": "x", ` + pub + `, "quote": "https://a.test/1", "quoteUrl": "https://a.test/2"}`, "quote", 422},
		{"quote not a URL", `{"type": "Note", "content": "x", ` + pub + `, "quoteUrl": "later"}`, "quoteUrl", 422},
		{"poll with both", `{"type": "Question", ` + pub + `, "oneOf": [{"name": "a"}], "anyOf": [{"name": "b"}]}`, "oneOf", 422},
		{"poll without options", `{"type": "Question", "content": "?", ` + pub + `}`, "oneOf", 422},
		{"poll option twice", `{"type": "Question", ` + pub + `, "oneOf": [{"name": "a"}, {"name": "a"}]}`, `"a"`, 422},
		{"poll votes set", `{"type": "Question", ` + pub + `, "oneOf": [{"name": "a", "replies": {"totalItems": 5}}]}`, "replies", 422},
		{"poll voters set", `{"type": "Question", ` + pub + `, "votersCount": 3, "oneOf": [{"name": "a"}]}`, "votersCount", 422},
		{"poll bad endTime", `{"type": "Question", ` + pub + `, "endTime": "soon", "oneOf": [{"name": "a"}]}`, "endTime", 422},
		{"options on a Note", `{"type": "Note", "content": "x", ` + pub + `, "oneOf": [{"name": "a"}]}`, "oneOf", 422},
		{"content not a string", `{"type": "Note", "content": {"en": "x"}, ` + pub + `}`, "contentMap", 422},
		{"bad context entry", `{"@context": ["https://www.w3.org/ns/activitystreams", 5], "type": "Note", "content": "x", ` + pub + `}`, "@context", 422},
		{"update changes the type", `{"type": "Update", "object": {"id": "` + note + `", "type": "Article", "content": "x"}}`, "Article", 422},
		{"update property", `{"type": "Update", "summary": "x", "object": {"id": "` + note + `", "content": "x"}}`, `"summary"`, 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.count(t, `SELECT COUNT(*) FROM objects`)
			r := b.do(t, http.MethodPost, "/users/alice/outbox", []byte(tc.body), "Content-Type", apJSON, "Authorization", "Bearer "+b.token)
			wantStatus(t, r, tc.status)
			var body struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil || !strings.Contains(body.Error, tc.names) {
				t.Fatalf("error %q does not name %s", body.Error, tc.names)
			}
			if after := b.count(t, `SELECT COUNT(*) FROM objects`); after != before {
				t.Fatalf("objects %d -> %d", before, after)
			}
		})
	}
}

// TestC2SQuoteAndLocalMention: a quote given in any of its three
// spellings is written in all three; a local actor mentioned by
// @name@host is resolved by the store and put in cc, and one by href is
// kept there.
func TestC2SQuoteAndLocalMention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bob, _ := b.actor(t, "bob")
	host := strings.TrimPrefix(b.base, "http://")
	for _, key := range []string{"quote", "quoteUrl", "_misskey_quote"} {
		r := b.post(t, "alice", b.token, map[string]any{"type": "Note", "content": "look", "to": "as:Public",
			key: remoteNote, "tag": []any{map[string]any{"type": "Mention", "name": "@bob@" + host}}})
		act := b.created(t, r, "Create")
		served := b.get(t, act.ObjectID, "Accept", apJSON).json(t)
		for _, k := range []string{"quote", "quoteUrl", "_misskey_quote"} {
			if served[k] != remoteNote {
				t.Fatalf("%s given: %s is %v", key, k, served[k])
			}
		}
		if cc, _ := served["cc"].([]any); len(cc) != 1 || cc[0] != bob.URI {
			t.Fatalf("cc %v, want bob", served["cc"])
		}
		tag := served["tag"].([]any)[0].(map[string]any)
		if tag["href"] != bob.URI {
			t.Fatalf("mention %v", tag)
		}
		ctx, _ := served["@context"].([]any)
		if len(ctx) < 2 || !strings.Contains(string(mustJSON(t, ctx)), "https://w3id.org/fep/044f#quote") {
			t.Fatalf("context %v lacks the quote terms", served["@context"])
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
