package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/courier-ap/courier/admin"
	"github.com/courier-ap/courier/store"
)

// TestCLIRelays: `courier admin relays add URL`, `relays` and `relays
// remove URL` against the real API and store: each add stores a pending
// relay and enqueues the instance actor's Follow (relay.send), each remove
// its Undo; bad input gets exit status 1 and one line on stderr.
func TestCLIRelays(t *testing.T) {
	t.Parallel()
	b := setup(t, func(b *bundle, c *admin.Config) { c.Relays = b.st })
	code, out, errOut := b.cli("relays")
	if code != 0 || strings.TrimSpace(out) != "no relays" {
		t.Fatalf("empty list: %d %q %q", code, out, errOut)
	}
	code, out, errOut = b.cli("relays", "add", "https://relay.example/inbox")
	if code != 0 || !strings.Contains(out, "relay https://relay.example/inbox (mastodon): pending") {
		t.Fatalf("add: %d %q %q", code, out, errOut)
	}
	if code, out, _ = b.cli("relays", "add", "https://litepub.example/actor"); code != 0 || !strings.Contains(out, "(litepub): pending") {
		t.Fatalf("add litepub: %d %q", code, out)
	}
	code, out, _ = b.cli("relays")
	ls := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(ls) != 3 || !strings.Contains(ls[1], "https://relay.example/inbox") || !strings.Contains(ls[1], "pending") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	if n := b.countRows(`SELECT COUNT(*) FROM event_queue WHERE type = ?`, store.EventRelaySend); n != 2 {
		t.Fatalf("%d relay sends enqueued, want 2 Follows", n)
	}
	for _, bad := range [][]string{
		{"relays", "add", "https://relay.example/inbox"}, // twice
		{"relays", "add", "ftp://relay.example/inbox"},
		{"relays", "remove", "https://unknown.example/inbox"},
	} {
		code, out, errOut := b.cli(bad...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: %d %q %q", bad, code, out, errOut)
		}
	}
	if code, out, errOut = b.cli("relays", "remove", "https://relay.example/inbox"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %d %q %q", code, out, errOut)
	}
	if n := b.countRows(`SELECT COUNT(*) FROM event_queue WHERE type = ?`, store.EventRelaySend); n != 3 {
		t.Fatalf("%d relay sends enqueued, want 2 Follows and an Undo", n)
	}
	var l admin.RelayList
	b.call("GET", "/admin/relays", http.StatusOK, &l)
	if len(l.Relays) != 1 || l.Relays[0].Style != "litepub" || l.Relays[0].State != "pending" {
		t.Fatalf("%+v", l)
	}
	// Without a relay store the endpoints say so.
	off := setup(t)
	off.wantError("GET", "/admin/relays", "", http.StatusConflict, "relays are not available")
}

func (b *bundle) countRows(q string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
	return n
}
