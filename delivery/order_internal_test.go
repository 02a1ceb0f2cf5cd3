package delivery

import (
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

// An activity and its Undo share an order key; activities about one object
// share its id; two actors' Likes of one note do not share one.
func TestOrderKeys(t *testing.T) {
	parse := func(doc string) *activitypub.Activity {
		t.Helper()
		a, err := activitypub.ParseActivity([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	const note = "https://c.example/objects/1"
	like := parse(`{"id":"https://c.example/a/1","type":"Like","actor":"https://c.example/users/alice","object":"` + note + `"}`)
	undo := parse(`{"id":"https://c.example/a/2","type":"Undo","actor":"https://c.example/users/alice","object":
		{"id":"https://c.example/a/1","type":"Like","actor":"https://c.example/users/alice","object":"` + note + `"}}`)
	other := parse(`{"id":"https://c.example/a/3","type":"Like","actor":"https://c.example/users/bob","object":"` + note + `"}`)
	create := parse(`{"id":"https://c.example/a/4","type":"Create","actor":"https://c.example/users/alice","object":{"id":"` + note + `","type":"Note"}}`)
	update := parse(`{"id":"https://c.example/a/5","type":"Update","actor":"https://c.example/users/alice","object":{"id":"` + note + `","type":"Note"}}`)
	del := parse(`{"id":"https://c.example/a/6","type":"Delete","actor":"https://c.example/users/alice","object":"` + note + `"}`)
	accept := parse(`{"id":"https://c.example/a/7","type":"Accept","actor":"https://c.example/users/alice","object":"https://r.example/f/1"}`)

	kl, _ := orderKey(like)
	ku, _ := orderKey(undo)
	ko, _ := orderKey(other)
	if kl == "" || kl != ku || kl == ko {
		t.Errorf("Like %q, its Undo %q, another actor's Like %q", kl, ku, ko)
	}
	for _, c := range []struct {
		act  *activitypub.Activity
		kind string
	}{{create, orderCreate}, {update, orderUpdate}, {del, ""}} {
		if k, kind := orderKey(c.act); k != note || kind != c.kind {
			t.Errorf("%s: key %q kind %q, want %q %q", c.act.Type, k, kind, note, c.kind)
		}
	}
	if k, _ := orderKey(accept); k != "" {
		t.Errorf("Accept has order key %q, want none", k)
	}
}
