package chaos

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// migratedDB returns the location of a real courier database migrated by
// the real runner (a SQLite file in a temporary directory, or a PostgreSQL
// database with COURIER_TEST_STORE=postgres) and its writer.
func migratedDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	loc := storetest.Location(t)
	db := storetest.Open(t, loc, storetest.Options{})
	return loc, db.Write
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", strings.Fields(q)[0:3], err)
	}
}

// TestEvaluate writes a database state by hand, as courier would have left
// it, and checks every figure the run derives from it and from the remote
// inboxes' records.
func TestEvaluate(t *testing.T) {
	t.Parallel()
	path, db := migratedDB(t)
	const (
		base = "http://127.0.0.1:9"
		h1   = "127.0.0.1:1001"
		h2   = "127.0.0.1:1002"
		bh   = "127.0.0.1:1666"
	)
	local := base + "/users/local0"
	act := func(n string) string { return base + "/activities/" + n }
	obj := func(n string) string { return base + "/objects/" + n }

	mustExec(t, db, `INSERT INTO actors (id, name, private_key_pem, public_key_pem, token_hash, created_at, updated_at)
		VALUES (1, 'local0', 'k', 'p', 'h', 0, 0)`)
	for _, a := range []struct{ uri, typ, object string }{
		{act("a1"), "Create", obj("n1")},
		{act("a2"), "Create", obj("n2")},
		{act("a3"), "Accept", "http://" + h1 + "/follows/f1"},
	} {
		mustExec(t, db, `INSERT INTO activities (uri, actor_uri, actor_id, type, object_uri, document, published_at, created_at)
			VALUES (?, ?, 1, ?, ?, '{}', 0, 0)`, a.uri, local, a.typ, a.object)
	}
	// The black-holed host: one delivery parked, one dead-lettered.
	mustExec(t, db, `INSERT INTO delivery_targets (event_id, parent_event_id, activity_id, inbox, host, parked_at, created_at)
		VALUES ('e1', 'p1', ?, ?, ?, 5, 0), ('e2', 'p2', 'a2', ?, ?, NULL, 0)`,
		act("a1"), "http://"+bh+"/inbox", bh, "http://"+bh+"/inbox", bh)
	mustExec(t, db, `INSERT INTO event_queue (event_id, type, target, payload, status, next_attempt_at, last_error, occurred_at, created_at, updated_at)
		VALUES ('e1', 'delivery.post', ?, '{}', 'pending', 0, NULL, 0, 0, 0),
		       ('e2', 'delivery.post', ?, '{}', 'dead_lettered', 0, 'delivery: host unavailable: parked since 1234', 0, 0, 0),
		       ('e3', 'inbox.received', NULL, '{}', 'dead_lettered', 0, 'inbox: boom 7', 0, 0, 0),
		       ('e4', 'activity.outgoing', NULL, '{}', 'pending', 0, NULL, 0, 0, 0)`, bh, bh)
	// Inbound: c1 and l1 imported, l2 acknowledged but never recorded.
	mustExec(t, db, `INSERT INTO inbox_activities (activity_id, type, actor, key_id, event_id, document, received_at, imported_at, outcome)
		VALUES ('http://h1/c1', 'Create', 'http://h1/u', 'k', 'i1', '{}', 0, 1, 'imported'),
		       ('http://h1/l1', 'Like', 'http://h1/u', 'k', 'i2', '{}', 0, 1, 'imported')`)
	mustExec(t, db, `INSERT INTO objects (uri, type, attributed_to, visibility, published_at, document, created_at, modified_at)
		VALUES ('http://h1/r1', 'Note', 'http://h1/u', 'public', 0, '{}', 0, 0)`)
	mustExec(t, db, `INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
		VALUES ('i1', 'inbox.import', 'done', 1, 2), ('i2', 'inbox.import', 'in_progress', 1, NULL), ('i2', 'other', 'done', 1, 2)`)
	mustExec(t, db, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES ('http://h1/l1', 'Like', 'http://h1/u', ?, 0)`, obj("n1"))

	w := newWorld("db", bh)
	w.addFollow(follow{id: "http://" + h1 + "/follows/f1", host: h1, local: local})
	w.addFollow(follow{id: "http://" + h2 + "/follows/f2", host: h2, local: local})
	w.addFollow(follow{id: "http://" + bh + "/follows/f3", host: bh, local: local})
	posts := []post{
		{activityID: act("a1"), typ: "Create", objectID: obj("n1"), host: h1},
		{activityID: act("a1"), typ: "Create", objectID: obj("n1"), host: h1}, // a duplicate POST
		{activityID: act("a1"), typ: "Create", objectID: obj("n1"), host: h2},
		{activityID: act("a2"), typ: "Create", objectID: obj("n2"), host: h1},
		{activityID: act("a3"), typ: "Accept", objectID: "http://" + h1 + "/follows/f1", host: h1},
		{activityID: act("rebuilt"), typ: "Create", objectID: obj("n1"), host: h1}, // same note, new id
		// a2 never reached h2 (the Accept of f2 is not in the database: not expected)
	}
	writes := writeStats{Acked: 2, Failed: 1, AckedIDs: map[string]note{act("a1"): {}, act("gone"): {}}}
	inbound := []inboundActivity{
		{id: "http://h1/c1", typ: "Create", objectID: "http://h1/r1", acked: true},
		{id: "http://h1/l1", typ: "Like", objectID: obj("n1"), acked: true},
		{id: "http://h1/l2", typ: "Like", objectID: obj("n2"), acked: true},
		{id: "http://h1/c2", typ: "Create", objectID: "http://h1/r2"},
		{id: "http://h1/f", typ: "Follow", acked: true},
	}

	ro, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	s, err := read(context.Background(), ro, bh)
	if err != nil {
		t.Fatal(err)
	}
	o := evaluate(w, s, posts, writes, inbound, 3)
	r := o.report
	checks := []struct {
		name      string
		got, want int
	}{
		{"creates", r.Creates, 2},
		{"accepts", r.Accepts, 1},
		{"written", r.Written, 3},
		{"acked missing", r.AckedMissing, 1},
		{"pairs expected", r.PairsExpected, 5}, // a1, a2 to h1 and h2; a3 to h1
		{"pairs received", r.PairsReceived, 4},
		{"pairs lost", r.PairsLost, 1},
		{"duplicate posts", r.DuplicatePOSTs, 1},
		{"max ids per pair", r.MaxIDsPerPair, 2},
		{"unexpected posts", r.UnexpectedPOSTs, 1},
		{"black-hole pairs", r.BlackHolePairs, 2},
		{"black-hole parked", r.BlackHoleParked, 1},
		{"black-hole dead", r.BlackHoleDead, 1},
		{"dead letters", r.DeadLetters, 2},
		{"foreign dead letters", r.ForeignDeadLetters, 1},
		{"inbound sent", r.InboundSent, 3},
		{"inbound unacked", r.InboundUnacked, 1},
		{"imported once", r.ImportedOnce, 2},
		{"imported twice", r.ImportedTwice, 0},
		{"inbound lost", r.InboundLost, 1},
		{"inbound resent", r.InboundResent, 3},
		{"ledger not done", r.LedgerNotDone, 1},
		{"busy rows", s.busy, 1},
		// a2 to h2, l2 not imported, c2 not acknowledged, the busy row
		{"outstanding", o.outstanding, 4},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if r.Reasons["delivery: host unavailable: parked since"] != 1 || r.Reasons["inbox: boom"] != 1 {
		t.Errorf("reasons %v", r.Reasons)
	}
	err = r.Failure()
	if err == nil {
		t.Fatal("Failure() = nil for a run with losses")
	}
	for _, want := range []string{"1 (activity, inbox) pairs lost", "2 distinct ids", "1 dead letters outside", "not imported", "never accepted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Failure() = %q, missing %q", err, want)
		}
	}
	if line := r.Line(); strings.Contains(line, "\n") || !strings.Contains(line, "lost=1") {
		t.Errorf("Line() = %q", line)
	}

	// Once a2's delivery to h2 is dead-lettered it stays lost, but there is
	// nothing left to wait for.
	mustExec(t, db, `INSERT INTO delivery_targets (event_id, parent_event_id, activity_id, inbox, host, created_at)
		VALUES ('e5', 'p2', ?, ?, ?, 0)`, act("a2"), "http://"+h2+"/inbox", h2)
	mustExec(t, db, `INSERT INTO delivery_attempts (event_id, activity_id, inbox, host, attempted_at, outcome, error)
		VALUES ('e5', ?, ?, ?, 0, 'dead', 'exhausted')`, act("a2"), "http://"+h2+"/inbox", h2)
	if s, err = read(context.Background(), ro, bh); err != nil {
		t.Fatal(err)
	}
	o = evaluate(w, s, posts, writes, inbound, 3)
	if o.report.PairsLost != 1 || o.report.ForeignDeadLetters != 2 || o.outstanding != 3 {
		t.Errorf("after the dead letter: lost %d, foreign dead letters %d, outstanding %d; want 1, 2, 3",
			o.report.PairsLost, o.report.ForeignDeadLetters, o.outstanding)
	}
}

// TestEvaluateImportedTwice: a like counted twice on a note is a double
// import, and a clean state passes.
func TestEvaluateImportedTwice(t *testing.T) {
	t.Parallel()
	path, db := migratedDB(t)
	const note = "http://127.0.0.1:9/objects/n1"
	mustExec(t, db, `INSERT INTO inbox_activities (activity_id, type, actor, key_id, event_id, document, received_at, imported_at, outcome)
		VALUES ('http://h/l1', 'Like', 'http://h/u', 'k', 'i1', '{}', 0, 1, 'imported')`)
	mustExec(t, db, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES ('http://h/l1', 'Like', 'http://h/u', ?, 0)`, note)
	inbound := []inboundActivity{{id: "http://h/l1", typ: "Like", objectID: note, acked: true}}
	ro, err := openReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()

	s, err := read(context.Background(), ro, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if r := evaluate(newWorld("db", "127.0.0.1:1"), s, nil, writeStats{}, inbound, 0).report; r.ImportedTwice != 0 || r.ImportedOnce != 1 {
		t.Fatalf("clean: imported once %d, twice %d; want 1 and 0", r.ImportedOnce, r.ImportedTwice)
	}

	// A second reaction row for the same like (another activity id, the
	// same actor would be refused by the schema): the note's like count is
	// now above the likes sent.
	mustExec(t, db, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES ('http://h/l1#again', 'Like', 'http://h/other', ?, 0)`, note)
	s, err = read(context.Background(), ro, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	r := evaluate(newWorld("db", "127.0.0.1:1"), s, nil, writeStats{}, inbound, 0).report
	if r.ImportedTwice != 1 {
		t.Fatalf("imported twice = %d, want 1", r.ImportedTwice)
	}
	if err := r.Failure(); err == nil || !strings.Contains(err.Error(), "imported twice") {
		t.Errorf("Failure() = %v", err)
	}
}

// TestCheckDatabaseIsReadOnly: the checks' connection reads courier's
// database and cannot write it, on either store.
func TestCheckDatabaseIsReadOnly(t *testing.T) {
	t.Parallel()
	loc, _ := migratedDB(t)
	ro, err := openReadOnly(loc)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var n int
	if err := ro.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("read: %d rows, %v", n, err)
	}
	if _, err := ro.Exec(`DELETE FROM event_queue`); err == nil {
		t.Fatal("the checks' connection wrote to courier's database")
	}
}

func TestNumbered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"WHERE a = ?", "WHERE a = $1"},
		{"WHERE a = ? AND b = ? OR c = ?", "WHERE a = $1 AND b = $2 OR c = $3"},
	} {
		if got := postgres.Rebind(c.in); got != c.want {
			t.Errorf("Rebind(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", "unknown"},
		{"delivery: host unavailable: parked since 1700000000000", "delivery: host unavailable: parked since"},
		{"delivery: POST http://example.com/inbox: timeout", "delivery: POST"},
		{"max_deliveries", "max_deliveries"},
		{"42", "unknown"},
		{strings.Repeat("x", 100), strings.Repeat("x", 80)},
	} {
		if got := reasonOf(c.in); got != c.want {
			t.Errorf("reasonOf(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
