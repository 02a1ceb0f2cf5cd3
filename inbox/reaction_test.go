package inbox_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/inbox"
	"github.com/courier-ap/courier/server"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// servedNote is the part of a served local object the reaction tests read.
type servedNote struct {
	Likes, Shares struct {
		TotalItems int `json:"totalItems"`
	}
	Reactions *struct {
		TotalItems int `json:"totalItems"`
		Items      []struct {
			Type       string `json:"type"`
			Content    string `json:"content"`
			TotalItems int    `json:"totalItems"`
			Tag        []struct {
				Type, Name string
				Icon       struct{ Type, URL string }
			} `json:"tag"`
		} `json:"items"`
	} `json:"reactions"`
}

// serveNote serves /objects/{localID} from the bundle's store through the
// real server, as JSON and as HTML.
func serveNote(t *testing.T, b *testBundle, localID string) (servedNote, string) {
	t.Helper()
	srv, err := server.New(server.Config{Store: b.st})
	if err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	srv.Register(r)
	ts := httptest.NewServer(r)
	defer ts.Close()
	get := func(accept string) []byte {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/objects/"+localID, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", localID, resp.StatusCode, body)
		}
		return body
	}
	var doc servedNote
	if err := json.Unmarshal(get(activitypub.ContentType), &doc); err != nil {
		t.Fatal(err)
	}
	return doc, string(get("text/html"))
}

// emojiCounts returns the served reactions as emoji -> count.
func (d servedNote) emojiCounts() map[string]int {
	m := map[string]int{}
	if d.Reactions == nil {
		return m
	}
	for _, it := range d.Reactions.Items {
		m[it.Content] = it.TotalItems
	}
	return m
}

// TestEmojiReactions replays the emoji reactions of honk, Pleroma, Akkoma
// and Misskey (testdata/reactions) and a plain Like through the real inbox,
// signed, and reads their effect from the served note: each emoji counted
// once per actor, a custom emoji with its image, a plain Like still a
// Like; a redelivery counts nothing; the Undos (embedded, and by id)
// remove what they name.
func TestEmojiReactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "react to me", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	locals := map[string]string{localNote: note.URI, localAlice: alice.URI}
	replay := func(name, want string) {
		t.Helper()
		if got := b.replay(t, "../reactions/"+name, nil, locals, nil); got != want {
			t.Fatalf("%s: outcome %q, want %q", name, got, want)
		}
	}
	replay("honk/emojireact.json", inbox.OutcomeReacted)
	replay("pleroma/emojireact.json", inbox.OutcomeReacted)
	replay("akkoma/emojireact_custom.json", inbox.OutcomeReacted)
	replay("misskey/like_reaction.json", inbox.OutcomeReacted)
	replay("misskey/like_custom.json", inbox.OutcomeReacted)
	replay("mastodon/like.json", inbox.OutcomeCounted)
	replay("pleroma/emojireaction_legacy.json", inbox.OutcomeReacted)

	doc, page := serveNote(t, b, note.LocalID)
	if doc.Likes.TotalItems != 1 || doc.Shares.TotalItems != 0 {
		t.Fatalf("likes %d shares %d, want 1 and 0: a Like with an emoji is no plain Like", doc.Likes.TotalItems, doc.Shares.TotalItems)
	}
	want := map[string]int{"🎉": 1, "👍": 1, ":blobcat:": 2, "❤": 1, "👌": 1}
	if got := doc.emojiCounts(); !sameCounts(got, want) || doc.Reactions.TotalItems != 6 {
		t.Fatalf("reactions %v (total %d), want %v and 6", got, doc.Reactions.TotalItems, want)
	}
	if first := doc.Reactions.Items[0]; first.Content != ":blobcat:" || first.Type != "EmojiReact" ||
		len(first.Tag) != 1 || first.Tag[0].Type != "Emoji" || !strings.HasSuffix(first.Tag[0].Icon.URL, ".png") {
		t.Fatalf("the custom emoji, most frequent, first with its image: %+v", first)
	}
	if !strings.Contains(page, "1 likes") || !strings.Contains(page, ":blobcat: 2") || !strings.Contains(page, "🎉 1") {
		t.Fatalf("the HTML page does not list the reactions:\n%s", page)
	}

	// A redelivery is imported once; the same emoji again by the same
	// actor under another id counts nothing.
	replay("pleroma/emojireact.json", inbox.OutcomeReacted)
	hank := b.remote.url("/u/hank")
	again := b.id("react")
	b.mustPost(t, signer{keyID: hank + "#main-key", key: key(t, keyRemote)},
		map[string]any{"id": again, "type": "EmojiReact", "actor": hank, "object": note.URI, "content": "🎉"})
	b.drain(t)
	if got := b.outcome(t, again); got != inbox.OutcomeNoMatch {
		t.Fatalf("a second 🎉 by the same actor: %q", got)
	}
	// An EmojiReact of something not local is not kept.
	elsewhere := b.id("react")
	b.mustPost(t, signer{keyID: hank + "#main-key", key: key(t, keyRemote)},
		map[string]any{"id": elsewhere, "type": "EmojiReact", "actor": hank, "object": b.remote.url("/notes/9"),
			"content": "🎉", "to": []string{alice.URI}})
	b.drain(t)
	if got := b.outcome(t, elsewhere); got != inbox.OutcomeIgnored {
		t.Fatalf("a reaction to a remote note: %q", got)
	}

	// The Undos: Pleroma's embeds its EmojiReact, Misskey's its Like, and
	// honk's is by id only.
	replay("pleroma/undo_emojireact.json", inbox.OutcomeUndone)
	replay("misskey/undo_like.json", inbox.OutcomeUndone)
	undo := b.id("undo")
	b.mustPost(t, signer{keyID: hank + "#main-key", key: key(t, keyRemote)},
		map[string]any{"id": undo, "type": "Undo", "actor": hank, "object": b.remote.url("/u/hank/bonk/7kQz3p9")})
	b.drain(t)
	if got := b.outcome(t, undo); got != inbox.OutcomeUndone {
		t.Fatalf("honk's Undo by id: %q", got)
	}
	doc, _ = serveNote(t, b, note.LocalID)
	if got, want := doc.emojiCounts(), map[string]int{":blobcat:": 2, "👌": 1}; !sameCounts(got, want) || doc.Likes.TotalItems != 1 {
		t.Fatalf("after the Undos: reactions %v likes %d, want %v and 1", got, doc.Likes.TotalItems, want)
	}

	// Deleting the note drops its reactions.
	if _, err := b.st.DeleteObject(b.ctx, alice, note.URI); err != nil {
		t.Fatal(err)
	}
	if n := b.count(t, `SELECT COUNT(*) FROM emoji_reactions`); n != 0 {
		t.Fatalf("%d emoji reactions outlive their note", n)
	}
}

func sameCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestEmojiReactionBounds: one actor's many custom emoji are kept up to
// store.MaxEmojiPerActor on one object, the rest refused, and the distinct
// emoji of an object up to store.MaxEmojiPerObject; an image URL past
// store.MaxEmojiIconLen is refused; a custom emoji's image is the one a
// reactor of its host gave, not another server's; a Unicode emoji has no
// image, whatever Emoji tag comes with it.
func TestEmojiReactionBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.localActor(t, "alice", false)
	_, note, err := notetest.Create(b.ctx, b.st, alice, notetest.Input{Content: "react to me", To: []string{store.Public}})
	if err != nil {
		t.Fatal(err)
	}
	react := func(actor, emoji, icon, emojiID string) string {
		t.Helper()
		id := b.id("react")
		act := map[string]any{"id": id, "type": "EmojiReact", "actor": actor, "object": note.URI, "content": emoji}
		if icon != "" {
			act["tag"] = []map[string]any{{"id": emojiID, "type": "Emoji", "name": emoji,
				"icon": map[string]string{"type": "Image", "url": icon}}}
		}
		b.remote.addPath(strings.TrimPrefix(actor, b.remote.url("")), key(t, keyRemote))
		b.mustPost(t, signer{keyID: actor + "#main-key", key: key(t, keyRemote)}, act)
		b.drain(t)
		return b.outcome(t, id)
	}
	longIcon := func(n int) string {
		u := b.remote.url("/emoji/")
		return u + strings.Repeat("e", n-len(u)-4) + ".png"
	}

	// One actor, 20 distinct custom emoji with long image URLs.
	mint := b.remote.url("/u/mint")
	for i := range 20 {
		name := fmt.Sprintf(":e%02d:", i)
		got := react(mint, name, longIcon(store.MaxEmojiIconLen), b.remote.url("/emoji/"+name))
		if want := i < store.MaxEmojiPerActor; want != (got == inbox.OutcomeReacted) ||
			!want && !strings.HasPrefix(got, "refused") {
			t.Fatalf("custom emoji %d by one actor: %q", i, got)
		}
	}
	// An image URL past the bound.
	if got := react(b.remote.url("/u/long"), ":long:", longIcon(store.MaxEmojiIconLen+1), ""); !strings.HasPrefix(got, "refused") {
		t.Fatalf("a custom emoji with an image URL of %d bytes: %q", store.MaxEmojiIconLen+1, got)
	}
	// :blobcat: of the reactors' host, then the same shortcode by a reactor
	// of that host whose image and emoji id are another server's.
	ownIcon := b.remote.url("/emoji/blobcat.png")
	if got := react(b.remote.url("/u/owner"), ":blobcat:", ownIcon, b.remote.url("/emoji/blobcat")); got != inbox.OutcomeReacted {
		t.Fatalf(":blobcat: by its host's reactor: %q", got)
	}
	if got := react(b.remote.url("/u/thief"), ":blobcat:", "https://zz.example/stolen.png", "https://zz.example/emoji/blobcat"); got != inbox.OutcomeReacted {
		t.Fatalf(":blobcat: with another server's image: %q", got)
	}
	// A Unicode emoji with an Emoji tag of its own.
	if got := react(b.remote.url("/u/thief"), "👍", b.remote.url("/emoji/thumb.png"), ""); got != inbox.OutcomeReacted {
		t.Fatalf("👍 with an image: %q", got)
	}

	doc, _ := serveNote(t, b, note.LocalID)
	if doc.Reactions == nil {
		t.Fatal("no reactions served")
	}
	byEmoji := map[string]int{}
	for _, it := range doc.Reactions.Items {
		byEmoji[it.Content]++
		switch {
		case it.Content == ":blobcat:":
			if it.TotalItems != 2 || len(it.Tag) != 1 || it.Tag[0].Icon.URL != ownIcon {
				t.Errorf(":blobcat: is served with %+v, want 2 and the image of its host's reactor %s", it, ownIcon)
			}
		case it.Content == "👍":
			if len(it.Tag) != 0 {
				t.Errorf("👍 is served with an image: %+v", it.Tag)
			}
		case strings.HasPrefix(it.Content, ":e"):
			if len(it.Tag) != 1 || len(it.Tag[0].Icon.URL) != store.MaxEmojiIconLen {
				t.Errorf("%s is served without its image: %+v", it.Content, it.Tag)
			}
		default:
			t.Errorf("served reaction %q", it.Content)
		}
	}
	if n := len(doc.Reactions.Items); n != store.MaxEmojiPerActor+2 || doc.Reactions.TotalItems != store.MaxEmojiPerActor+3 {
		t.Fatalf("%d reactions served (total %d), want %d (total %d)", n, doc.Reactions.TotalItems,
			store.MaxEmojiPerActor+2, store.MaxEmojiPerActor+3)
	}

	// Many actors, one distinct emoji each: the object holds
	// MaxEmojiPerObject distinct emoji, and an emoji it has still counts.
	distinct := len(doc.Reactions.Items)
	for i := 0; distinct < store.MaxEmojiPerObject+5; i++ {
		actor := fmt.Sprintf("https://h%d.example/u/x", i)
		var added bool
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			added, err = b.st.AddEmojiReactionTx(b.ctx, tx, store.EmojiReaction{ActivityURI: actor + "/react", ActorURI: actor,
				ObjectURI: note.URI, Emoji: fmt.Sprintf(":d%d:", i)})
			return err
		})
		switch {
		case distinct < store.MaxEmojiPerObject && (err != nil || !added):
			t.Fatalf("distinct emoji %d: %v %v", distinct+1, added, err)
		case distinct >= store.MaxEmojiPerObject && store.ErrorCode(err) != store.EUNPROCESSABLE:
			t.Fatalf("distinct emoji %d past the bound: %v %v", distinct+1, added, err)
		}
		distinct++
	}
	err = b.db.Tx(b.ctx, func(tx *sql.Tx) error {
		added, err := b.st.AddEmojiReactionTx(b.ctx, tx, store.EmojiReaction{ActivityURI: "https://late.example/react",
			ActorURI: "https://late.example/u/x", ObjectURI: note.URI, Emoji: "👍"})
		if err == nil && !added {
			err = errors.New("not added")
		}
		return err
	})
	if err != nil {
		t.Fatalf("an emoji the object has, by another actor: %v", err)
	}
	doc, _ = serveNote(t, b, note.LocalID)
	if n := len(doc.Reactions.Items); n != store.MaxEmojiPerObject {
		t.Fatalf("%d distinct emoji served, want %d", n, store.MaxEmojiPerObject)
	}
}
