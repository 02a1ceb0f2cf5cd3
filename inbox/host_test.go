package inbox_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// TestSignedForAnotherHostRefused: a delivery signed for another server
// (Host: other.example), replayed to courier with that Host inside the
// Date window, verifies as a signature but is not addressed here: 421,
// nothing stored. The same activity signed for courier's own Host is
// accepted.
func TestSignedForAnotherHostRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.remote.add("bob", key(t, keyRemote))
	b.localActor(t, "alice", false)
	bob := b.remote.actor("bob")
	asBob := b.as(t, "bob")

	id := b.id("follow")
	body := mustJSON(t, activity(id, "Follow", bob, b.base+"/users/alice"))
	for _, target := range []string{"http://other.example/inbox", "http://other.example:80/inbox"} {
		// Signed for other.example, as that server received it ...
		req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", activitypub.ContentType)
		if err := activitypub.SignRequest(req, body, asBob.keyID, asBob.key, time.Now()); err != nil {
			t.Fatal(err)
		}
		// ... and replayed to courier's address with its Host kept.
		replay, err := http.NewRequest(http.MethodPost, b.base+"/inbox", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		replay.Header = req.Header.Clone()
		replay.Host = req.Host
		status, msg := do(t, replay)
		if status != http.StatusMisdirectedRequest || !strings.Contains(msg, "addressed to another host") {
			t.Fatalf("replay signed for %s: %d %s, want 421", target, status, msg)
		}
	}
	if n := b.count(t, `SELECT COUNT(*) FROM inbox_activities`); n != 0 {
		t.Fatalf("%d activities stored from replays", n)
	}
	if n := b.result(t, "wrong_host"); n != 2 {
		t.Fatalf("wrong_host counted %d times, want 2", n)
	}
	b.mustPost(t, asBob, activity(id, "Follow", bob, b.base+"/users/alice"))

}
