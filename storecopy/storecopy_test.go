package storecopy

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-ap/courier/app"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/postgres"
	"github.com/courier-ap/courier/postgres/pgtest"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
	"github.com/courier-ap/courier/sqlite"
	"github.com/courier-ap/courier/store"
	"github.com/courier-ap/courier/store/notetest"
)

// The source of a copy is a SQLite file by definition and the target a
// PostgreSQL database, whatever COURIER_TEST_STORE says: every test here
// runs on both stores at once.
func TestMain(m *testing.M) {
	if from := os.Getenv(envChildFrom); from != "" {
		os.Exit(child(from, os.Getenv(envChildTo)))
	}
	if path := os.Getenv(envChildHold); path != "" {
		db, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer db.Close()
		fmt.Println("open")
		select {} // until the parent's SIGKILL
	}
	os.Exit(storetest.Main(m))
}

// The test binary run as a child copies $envChildFrom to $envChildTo, says
// on stdout when it is in the middle of event_queue and waits there to be
// killed.
const (
	envChildFrom = "STORECOPY_TEST_CHILD_FROM"
	envChildTo   = "STORECOPY_TEST_CHILD_TO"
	// envChildHold makes the child open the SQLite file it names and wait.
	envChildHold = "STORECOPY_TEST_CHILD_HOLD"
)

// startChild runs the test binary as a child with env added, waits for its
// first line on stdout and returns it; the child is killed when t ends.
func startChild(t *testing.T, env ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // may be gone already
		cmd.Wait()         //nolint:errcheck // killed
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child's first line %q: %v", line, err)
	}
	return cmd, line
}

func child(from, to string) int {
	_, err := Run(context.Background(), from, to, Options{BatchSize: 50, Progress: func(p Progress) {
		if p.Table == "event_queue" && p.Done >= 400 {
			fmt.Printf("mid-table %d\n", p.Done)
			select {} // until the parent's SIGKILL
		}
	}})
	fmt.Fprintln(os.Stderr, "child copy ended:", err)
	return 1
}

const base = "https://courier.example"

// newSource is a migrated SQLite file in t's temporary directory.
func newSource(t testing.TB) (string, *sqldb.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "courier.db")
	return path, storetest.Open(t, path, storetest.Options{Synchronous: "NORMAL"})
}

// newTarget is an empty PostgreSQL database (not migrated: the copy does it).
func newTarget(t testing.TB) (string, *sqldb.DB) {
	t.Helper()
	dsn := pgtest.DSN(t)
	db, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return dsn, db
}

func execSQL(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// populate fills every table of an instance: actors, notes, follows, likes,
// blocks and relays through package store (with their outbox rows and
// payloads), then what the worker, the delivery service and the inbox
// would have written, in the statements they use: events in every status,
// the ledger, delivery targets and attempts, host health and signature
// schemes, inbound activities, exhausted JetStream messages.
func populate(t testing.TB, db *sqldb.DB, extraEvents int) {
	t.Helper()
	ctx := context.Background()
	clock := time.UnixMilli(1_764_000_000_000)
	s := store.New(db, base, func() time.Time { clock = clock.Add(time.Second); return clock })
	if _, err := s.InstanceActor(ctx); err != nil {
		t.Fatal(err)
	}
	alice, _, err := s.CreateActor(ctx, store.NewActor{Name: "alice", DisplayName: "Alice ✉", Summary: "<p>she/her</p>"})
	if err != nil {
		t.Fatal(err)
	}
	bob, _, err := s.CreateActor(ctx, store.NewActor{Name: "bob", ManuallyApprovesFollowers: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		in := notetest.Input{Content: fmt.Sprintf("<p>note %d — ünïcode, \"quotes\" and a long tail %s</p>", i, strings.Repeat("x", 300*i)),
			To: []string{"https://www.w3.org/ns/activitystreams#Public"}}
		if _, _, err := notetest.Create(ctx, s, alice, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := notetest.Create(ctx, s, bob, notetest.Input{Content: "for followers", Summary: "cw", To: []string{base + "/users/bob/followers"}}); err != nil {
		t.Fatal(err)
	}
	// An object kept whole, with a client context, a hashtag and poll
	// options, and a vote on it.
	_, poll, err := s.CreateObject(ctx, alice, store.ObjectInput{Type: "Question", Content: "tea?",
		To: []string{"https://www.w3.org/ns/activitystreams#Public"}, Hashtags: []string{"tea"},
		Context:    []any{map[string]any{"rev": "https://review.example/ns#"}},
		Properties: map[string]any{"content": "tea?", "oneOf": []any{map[string]any{"type": "Note", "name": "yes"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Follow(ctx, alice, "https://mastodon.example/users/carol"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Like(ctx, alice, "https://mastodon.example/users/carol/statuses/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Block(ctx, bob, "https://spam.example/users/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddRelay(ctx, "https://relay.example/inbox"); err != nil {
		t.Fatal(err)
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range 3 {
			if _, err := s.AddFollowerTx(ctx, tx, store.Follower{ActorID: alice.ID, URI: fmt.Sprintf("https://h%d.example/users/f", i),
				Inbox: fmt.Sprintf("https://h%d.example/users/f/inbox", i), SharedInbox: fmt.Sprintf("https://h%d.example/inbox", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mover, _, err := s.CreateActor(ctx, store.NewActor{Name: "mover"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveActor(ctx, mover, "https://mastodon.example/users/mover"); err != nil {
		t.Fatal(err)
	}
	dave, _, err := s.CreateActor(ctx, store.NewActor{Name: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteActor(ctx, dave.Name); err != nil {
		t.Fatal(err)
	}

	// Deliveries and other events, then every status a row can be in.
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		var evs []outbox.Event
		for i := range max(extraEvents, 8) {
			evs = append(evs, outbox.Event{
				ID: outbox.ChildID("parent", fmt.Sprint(i)), Type: "delivery.post", Target: fmt.Sprintf("h%d.example", i%4),
				Payload: json.RawMessage(fmt.Sprintf(`{"inbox":"https://h%d.example/inbox","n":%d}`, i%4, i)), OccurredAt: clock, Lane: i % 2,
			})
		}
		return outbox.Enqueue(ctx, tx, evs...)
	})
	if err != nil {
		t.Fatal(err)
	}
	w := db.Write
	now := clock.UnixMilli()
	// The store's own events are done: their (pending, type) counts drop to
	// zero rows, which the target's triggers never write (the copy replaces
	// the counts with the source's).
	execSQL(t, w, `UPDATE event_queue SET status = 'done', updated_at = ? WHERE type <> 'delivery.post'`, now)
	execSQL(t, w, `UPDATE event_queue SET status = 'processing', claimed_at = ?, attempts = 1 WHERE id IN (SELECT id FROM event_queue ORDER BY id LIMIT 2)`, now)
	execSQL(t, w, `UPDATE event_queue SET status = 'done', updated_at = ? WHERE id IN (SELECT id FROM event_queue WHERE status = 'pending' ORDER BY id LIMIT 3)`, now)
	execSQL(t, w, `UPDATE event_queue SET status = 'dead_lettered', attempts = 10, last_error = 'inbox answered 410 Gone' WHERE id IN (SELECT id FROM event_queue WHERE status = 'pending' ORDER BY id DESC LIMIT 2)`)
	execSQL(t, w, `UPDATE event_queue SET attempts = 3, next_attempt_at = ?, last_error = 'timeout', republished = 1 WHERE id = (SELECT MIN(id) FROM event_queue WHERE status = 'pending')`, now+60_000)
	execSQL(t, w, `INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
		SELECT event_id, 'delivery', 'done', updated_at, updated_at FROM event_queue WHERE status = 'done'`)
	execSQL(t, w, `INSERT INTO processed_events (event_id, handler, status, started_at, processed_at)
		SELECT event_id, 'delivery', 'in_progress', updated_at, NULL FROM event_queue WHERE status = 'processing'`)
	execSQL(t, w, `INSERT INTO delivery_targets (event_id, parent_event_id, activity_id, inbox, host, parked_at, created_at)
		SELECT event_id, 'parent', 'https://courier.example/activities/1', 'https://' || target || '/inbox', target,
			CASE WHEN target = 'h3.example' THEN ? END, created_at FROM event_queue WHERE type = 'delivery.post'`, now)
	execSQL(t, w, `INSERT INTO delivery_attempts (event_id, activity_id, inbox, host, attempted_at, status_code, outcome, error, duration_ms)
		SELECT event_id, activity_id, inbox, host, ?, 503, 'retry', 'service unavailable', 1200 FROM delivery_targets`, now)
	execSQL(t, w, `INSERT INTO delivery_attempts (event_id, activity_id, inbox, host, attempted_at, status_code, outcome, duration_ms)
		SELECT event_id, activity_id, inbox, host, ?, 202, 'delivered', 80 FROM delivery_targets WHERE host <> 'h3.example'`, now+1000)
	execSQL(t, w, `INSERT INTO delivery_hosts (host, state, consecutive_failures, first_failure_at, last_failure_at, last_error, unavailable_since, next_probe_at, probe_interval_ms, updated_at)
		VALUES ('h3.example', 'unavailable', 12, ?, ?, 'dial tcp: connection refused', ?, ?, 60000, ?),
		       ('h2.example', 'failing', 1, ?, ?, '503', NULL, NULL, 0, ?),
		       ('h1.example', 'healthy', 0, NULL, NULL, '', NULL, NULL, 0, ?)`,
		now-86_400_000, now, now-3_600_000, now+60_000, now, now, now, now, now)
	execSQL(t, w, `INSERT INTO delivery_signature_schemes (host, rfc9421, rfc9421_until, ed25519, ed25519_until, learned_from, updated_at, no_fallback_until)
		VALUES ('h1.example', 'accepted', ?, 'refused', ?, 'inbound', ?, NULL), ('h2.example', NULL, NULL, NULL, NULL, '', ?, ?)`,
		now+86_400_000, now+86_400_000, now, now, now+1000)
	execSQL(t, w, `INSERT INTO delivery_processes (id, hostname, pid, started_at, seen_at)
		VALUES ('2b8c1a4e-5d6f-4a7b-8c9d-0e1f2a3b4c5d', 'worker-1', 4242, ?, ?)`, now-3_600_000, now)
	execSQL(t, w, `INSERT INTO inbox_activities (activity_id, type, actor, object_id, inbox, key_id, event_id, document, received_at, imported_at, outcome)
		VALUES ('https://h1.example/a/1', 'Create', 'https://h1.example/users/f', 'https://h1.example/n/1', '/inbox', 'https://h1.example/users/f#main-key', 'e-in-1', '', ?, ?, 'imported'),
		       ('https://h2.example/a/2', 'Follow', 'https://h2.example/users/f', ?, '/users/alice/inbox', 'https://h2.example/users/f#main-key', 'e-in-2', '{"type":"Follow"}', ?, NULL, NULL)`,
		now, now+5, base+"/users/alice", now)
	execSQL(t, w, `INSERT INTO delivery_outcomes (event_id, activity_id, outcome, settled_at)
		VALUES ('e-out-1', 'https://courier.example/activities/1', 'delivered', ?), ('e-out-2', 'https://courier.example/activities/1', 'dead', ?)`, now, now)
	execSQL(t, w, `INSERT INTO delivery_outcome_counts (activity_id, total, delivered, updated_at)
		VALUES ('https://courier.example/activities/1', 3, 1, ?)`, now)
	execSQL(t, w, `INSERT INTO webhook_endpoints (url, actor_id, events, created_at)
		VALUES ('http://127.0.0.1:8080/hook', NULL, '', ?), ('http://app.internal/hook', (SELECT id FROM actors ORDER BY id LIMIT 1), 'activity.create,follow.requested', ?)`, now, now)
	execSQL(t, w, `INSERT INTO webhook_secrets (endpoint_id, secret, created_at, expires_at)
		VALUES (1, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', ?, ?), (1, 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD', ?, NULL), (2, 'whsec_aGVsbG8=', ?, NULL)`,
		now-1000, now+86_400_000, now, now)
	execSQL(t, w, `INSERT INTO jetstream_exhausted (advisory_id, reason, stream, consumer, stream_seq, deliveries, event_id, event_type, detail, advised_at, recorded_at, replays)
		VALUES ('adv-1', 'max_deliveries', 'COURIER_EVENTS', 'courier-worker', 42, 10, 'e-x', 'delivery.post', 'handler failed', ?, ?, 1)`, now, now)
	// The sweeper folds the counts enqueues append (migration 0020); a store
	// still carries some not yet folded: one pending count moves back
	// there, the sums unchanged.
	if err := outbox.NewQueue(db.Write, outbox.QueueOptions{Read: db.Read}).FoldCounts(ctx); err != nil {
		t.Fatal(err)
	}
	pick := `SELECT status, type, shard FROM event_queue_counts WHERE status = 'pending' AND n > 0 ORDER BY type, shard LIMIT 1`
	execSQL(t, w, `INSERT INTO event_queue_count_deltas (status, type, n) SELECT status, type, 1 FROM (`+pick+`) AS p`)
	execSQL(t, w, `UPDATE event_queue_counts SET n = n - 1 WHERE (status, type, shard) = (`+pick+`)`)
	execSQL(t, w, `INSERT INTO domain_blocks (domain, reason, created_at) VALUES ('spam.example', 'spam', ?)`, now)
	execSQL(t, w, `INSERT INTO poll_votes (object_id, voter_uri, option_name, activity_uri, created_at)
		VALUES (?, 'https://h1.example/users/f', 'yes', 'https://h1.example/votes/1', ?)`, poll.RowID, now)
	execSQL(t, w, `INSERT INTO reactions (activity_uri, type, actor_uri, object_uri, created_at)
		VALUES ('https://h1.example/likes/1', 'Like', 'https://h1.example/users/f', ?, ?)`, base+"/objects/1", now)
	execSQL(t, w, `INSERT INTO emoji_reactions (activity_uri, actor_uri, object_uri, emoji, emoji_icon, created_at)
		VALUES ('https://h1.example/react/1', 'https://h1.example/users/f', ?, ':blobcat:', 'https://h1.example/emoji/blobcat.png', ?),
		       ('https://h1.example/react/2', 'https://h1.example/users/f', ?, '👍', '', ?)`, base+"/objects/1", now, base+"/objects/1", now)
	execSQL(t, w, `INSERT INTO featured (actor_id, object_uri, created_at)
		SELECT id, ?, ? FROM actors WHERE name = 'alice'`, base+"/objects/1", now)
	execSQL(t, w, `UPDATE actors SET profile_json = '{"discoverable":true}' WHERE name = 'alice'`)
	// Quote consent: alice's default policy, a stamp her first note
	// granted, and a request of hers (migration 0037).
	execSQL(t, w, `INSERT INTO actor_quote_policies (actor_id, can_quote, updated_at)
		SELECT id, '{"automaticApproval":["https://www.w3.org/ns/activitystreams#Public"]}', ? FROM actors WHERE name = 'alice'`, now)
	execSQL(t, w, `INSERT INTO quote_stamps (local_id, object_id, actor_id, quote_uri, quoter_uri, request_uri, state, created_at, updated_at)
		SELECT 'stamp-1', o.id, o.actor_id, 'https://h1.example/n/q', 'https://h1.example/users/f', 'https://h1.example/qr/1', 'accepted', ?, ?
		FROM objects o WHERE o.actor_id IS NOT NULL ORDER BY o.id LIMIT 1`, now, now)
	execSQL(t, w, `INSERT INTO quote_requests (object_id, quoted_uri, quoted_author, request_uri, state, created_at, updated_at)
		SELECT o.id, 'https://h1.example/n/1', 'https://h1.example/users/f', ?, 'pending', ?, ?
		FROM objects o WHERE o.actor_id IS NOT NULL ORDER BY o.id LIMIT 1`, base+"/activities/qr-1", now, now)
	execSQL(t, w, `INSERT INTO remote_actors (uri, inbox, shared_inbox, key_id, public_key_pem, document, fetched_at, gone_at)
		VALUES ('https://h1.example/users/f', 'https://h1.example/users/f/inbox', 'https://h1.example/inbox', 'https://h1.example/users/f#main-key', 'PEM', '{}', ?, NULL),
		       ('https://gone.example/users/g', 'https://gone.example/users/g/inbox', NULL, NULL, NULL, '{}', ?, ?)`, now, now, now)
	execSQL(t, w, `INSERT INTO objects (uri, type, attributed_to, actor_id, visibility, published_at, document, created_at, modified_at)
		VALUES ('https://h1.example/n/1', 'Note', 'https://h1.example/users/f', NULL, 'public', ?, '{"content":"remote"}', ?, ?)`, now, now, now)
	// An inbound reply's bytes kept for its forward (migration 0036).
	execSQL(t, w, `INSERT INTO forwards (activity_id, document, created_at)
		VALUES ('https://h1.example/a/reply', '{"id":"https://h1.example/a/reply","type":"Create"}', ?)`, now)
	// The last Move honoured of a remote account (migration 0038).
	execSQL(t, w, `INSERT INTO remote_moves (actor_uri, target, moved_at)
		VALUES ('https://h1.example/users/old', 'https://h2.example/users/new', ?)`, now)
	// A Delete of a remote object never stored leaves a tombstone (migration 0033).
	execSQL(t, w, `INSERT INTO remote_tombstones (object_uri, actor_uri, deleted_at)
		VALUES ('https://h1.example/n/gone', 'https://h1.example/users/f', ?)`, now)
	execSQL(t, w, `UPDATE remote_tombstone_counts SET held = held + 1`)
	// The base URL the server records at start (migration 0035).
	execSQL(t, w, `INSERT INTO instance_base_url (id, base_url, updated_at) VALUES (1, ?, ?)`, base, now)
	// The application's inbox view: two items of alice's, one of bob's.
	rec, err := app.NewRecorder(app.RecorderConfig{DB: db, Store: s, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		return rec.RecordTx(ctx, tx,
			app.Item{ActorID: alice.ID, ActivityURI: "https://h1.example/a/1", Type: "Create", Kind: app.KindMention,
				Activity: json.RawMessage(`{"id":"https://h1.example/a/1","type":"Create","content":"<p>é</p>"}`)},
			app.Item{ActorID: alice.ID, ActivityURI: "https://h1.example/a/3", Type: "Announce",
				Activity: json.RawMessage(`{"id":"https://h1.example/a/3","type":"Announce"}`)},
			app.Item{ActorID: bob.ID, ActivityURI: "https://h2.example/a/2", Type: "Follow", Kind: app.KindFollowRequest,
				Activity: json.RawMessage(`{"id":"https://h2.example/a/2","type":"Follow"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	// The outbox view: what alice writes once the recorder is on the store.
	if _, _, err := notetest.Create(ctx, s, alice, notetest.Input{Content: "for the outbox view",
		To: []string{"https://www.w3.org/ns/activitystreams#Public"}}); err != nil {
		t.Fatal(err)
	}
}

// dump reads every row of table as sorted "column=value" strings, values
// tagged with their Go type: a row equal on both stores is equal column by
// column, type included.
func dump(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM "` + table + `"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		fields := make([]string, len(cols))
		for i, v := range vals {
			var s string
			switch x := v.(type) {
			case nil:
				s = "NULL"
			case int64:
				s = fmt.Sprintf("int:%d", x)
			case string:
				s = fmt.Sprintf("text:%q", x)
			case []byte:
				s = "bytes:" + hex.EncodeToString(x)
			default:
				s = fmt.Sprintf("%T:%v", x, x)
			}
			fields[i] = cols[i] + "=" + s
		}
		sort.Strings(fields)
		out = append(out, strings.Join(fields, " "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// schemaTables lists the tables the migrations made in the SQLite file,
// read from the file itself rather than from the copy's list.
func schemaTables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	names, err := strings1(context.Background(), db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name <> 'schema_migrations' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// assertSame compares every table of the schema row by row.
func assertSame(t *testing.T, src, dst *sqldb.DB) {
	t.Helper()
	for _, table := range schemaTables(t, src.Read) {
		a, b := dump(t, src.Read, table), dump(t, dst.Read, table)
		if !slices.Equal(a, b) {
			for i := range max(len(a), len(b)) {
				var x, y string
				if i < len(a) {
					x = a[i]
				}
				if i < len(b) {
					y = b[i]
				}
				if x != y {
					t.Fatalf("%s differs (%d rows on SQLite, %d on PostgreSQL); first difference:\nsqlite:   %s\npostgres: %s", table, len(a), len(b), x, y)
				}
			}
		}
	}
}

// The copy's table list is the migrations' tables, and their foreign keys
// point backwards in it, on a fresh database of either dialect.
func TestTablesAreTheMigrations(t *testing.T) {
	_, src := newSource(t)
	_, dst := newTarget(t)
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, dst.Write, migrations.Options{Dialect: migrations.Postgres}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tb := range tables {
		names = append(names, tb.name)
	}
	slices.Sort(names)
	if got := schemaTables(t, src.Read); !slices.Equal(got, names) {
		t.Fatalf("the migrations make tables %v; storecopy knows %v", got, names)
	}
	if _, err := planAll(ctx, src.Read, dst.Read); err != nil {
		t.Fatal(err)
	}
}

// A populated instance is copied whole: every table's rows are equal on
// both stores, column by column; a second run copies nothing and agrees;
// PostgreSQL then numbers new rows past the copied ids.
func TestCopyWholeInstance(t *testing.T) {
	ctx := context.Background()
	_, src := newSource(t)
	populate(t, src, 40)
	for _, table := range schemaTables(t, src.Read) {
		var n int
		if err := src.Read.QueryRow(`SELECT COUNT(*) FROM "` + table + `"`).Scan(&n); err != nil || n == 0 {
			t.Fatalf("the populated source has %d rows in %s (%v): the test must fill every table", n, table, err)
		}
	}
	var statuses []string
	statuses, err := strings1(ctx, src.Read, `SELECT DISTINCT status FROM event_queue ORDER BY status`)
	if err != nil || !slices.Equal(statuses, []string{"dead_lettered", "done", "pending", "processing"}) {
		t.Fatalf("event_queue statuses %v (%v), want all four", statuses, err)
	}
	var zero int
	if err := src.Read.QueryRow(`SELECT COUNT(*) FROM event_queue_counts WHERE n = 0`).Scan(&zero); err != nil || zero == 0 {
		t.Fatalf("%d zero counts on the source (%v); the test wants some", zero, err)
	}
	_, dst := newTarget(t)
	var reports int
	res, err := Copy(ctx, src, dst, Options{BatchSize: 7, Progress: func(Progress) { reports++ }})
	if err != nil {
		t.Fatal(err)
	}
	if reports < len(tables) {
		t.Fatalf("%d progress reports for %d tables", reports, len(tables))
	}
	assertSame(t, src, dst)
	replaced := map[string]bool{}
	for _, tb := range tables {
		replaced[tb.name] = tb.replace
	}
	for _, r := range res {
		// A replaced table that the copy's own writes (delivery_hosts'
		// triggers) already made equal to the source's is left as it is:
		// assertSame above has checked its rows.
		if r.Rows == 0 || (r.Copied != r.Rows && !(replaced[r.Table] && r.Copied == 0)) {
			t.Fatalf("%s: %d rows, %d copied", r.Table, r.Rows, r.Copied)
		}
	}

	again, err := Copy(ctx, src, dst, Options{BatchSize: 7})
	if err != nil {
		t.Fatalf("second copy: %v", err)
	}
	for i, r := range again {
		if r.Copied != 0 || r.Rows != res[i].Rows || r.Checksum != res[i].Checksum {
			t.Fatalf("second copy of %s: %+v, first %+v", r.Table, r, res[i])
		}
	}
	assertSame(t, src, dst)

	// PostgreSQL's own inserts take ids past the copied ones.
	var maxActor, maxEvent int64
	if err := src.Read.QueryRow(`SELECT MAX(id) FROM actors`).Scan(&maxActor); err != nil {
		t.Fatal(err)
	}
	if err := src.Read.QueryRow(`SELECT MAX(id) FROM event_queue`).Scan(&maxEvent); err != nil {
		t.Fatal(err)
	}
	s := store.New(dst, base, nil)
	erin, _, err := s.CreateActor(ctx, store.NewActor{Name: "erin"})
	if err != nil {
		t.Fatalf("a new actor on PostgreSQL after the copy: %v", err)
	}
	if erin.ID <= maxActor {
		t.Fatalf("new actor id %d, copied ids up to %d", erin.ID, maxActor)
	}
	if _, _, err := notetest.Create(ctx, s, erin, notetest.Input{Content: "first on postgres", To: []string{"https://www.w3.org/ns/activitystreams#Public"}}); err != nil {
		t.Fatalf("a new note on PostgreSQL after the copy: %v", err)
	}
	var newEvent int64
	if err := dst.Read.QueryRow(`SELECT MAX(id) FROM event_queue`).Scan(&newEvent); err != nil || newEvent <= maxEvent {
		t.Fatalf("newest event id %d (%v), copied up to %d", newEvent, err, maxEvent)
	}
	// The counts the triggers keep agree with the rows (summed over the
	// shards of migration 0016 and the deltas of 0020: the new note's are
	// appended).
	var wrong int
	err = dst.Read.QueryRow(`SELECT COUNT(*) FROM (SELECT status, type, COUNT(*) AS n FROM event_queue GROUP BY status, type) q
		LEFT JOIN (SELECT status, type, SUM(n) AS n FROM (SELECT status, type, n FROM event_queue_counts
			UNION ALL SELECT status, type, n FROM event_queue_count_deltas) AS u GROUP BY status, type) c USING (status, type)
		WHERE c.n IS DISTINCT FROM q.n`).Scan(&wrong)
	if err != nil || wrong != 0 {
		t.Fatalf("%d (status, type) counts differ from the rows on the target (%v)", wrong, err)
	}
}

// copyCancelledAt copies src to dst in batches of 50 and cancels the copy
// once done of event_queue's rows are copied.
func copyCancelledAt(t *testing.T, src, dst *sqldb.DB, done int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Copy(ctx, src, dst, Options{BatchSize: 50, Progress: func(p Progress) {
		if p.Table == "event_queue" && p.Done >= done {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled copy: %v", err)
	}
}

// A copy cancelled in the middle of a table leaves a prefix; the re-run
// copies the rest only, and the result is the same as one uninterrupted.
func TestInterruptedCopyResumes(t *testing.T) {
	ctx := context.Background()
	_, src := newSource(t)
	populate(t, src, 1200)
	_, dst := newTarget(t)
	copyCancelledAt(t, src, dst, 400)
	var partial, total int64
	if err := dst.Read.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	if err := src.Read.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if partial < 400 || partial >= total {
		t.Fatalf("interrupted copy left %d of %d event_queue rows", partial, total)
	}
	var later int64
	if err := dst.Read.QueryRow(`SELECT COUNT(*) FROM delivery_attempts`).Scan(&later); err != nil || later != 0 {
		t.Fatalf("a later table has %d rows after the interruption (%v)", later, err)
	}
	res, err := Copy(ctx, src, dst, Options{BatchSize: 50})
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	for _, r := range res {
		switch r.Table {
		case "actors":
			if r.Copied != 0 {
				t.Fatalf("re-run copied %d actors again", r.Copied)
			}
		case "event_queue":
			if r.Copied != total-partial {
				t.Fatalf("re-run copied %d event_queue rows, want the %d missing", r.Copied, total-partial)
			}
		}
	}
	assertSame(t, src, dst)
}

// A source that changed between an interrupted copy and its re-run (the
// instance ran meanwhile) fails the verification and names the table.
func TestChangedSourceFailsVerification(t *testing.T) {
	ctx := context.Background()
	_, src := newSource(t)
	populate(t, src, 300)
	_, dst := newTarget(t)
	copyCancelledAt(t, src, dst, 100)
	// A row the first run copied changes on the source.
	execSQL(t, src.Write, `UPDATE event_queue SET attempts = attempts + 1 WHERE id = (SELECT MIN(id) FROM event_queue)`)
	_, err := Copy(ctx, src, dst, Options{BatchSize: 50})
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "event_queue (") || strings.Contains(err.Error(), "actors (") {
		t.Fatalf("re-run after the source changed: %v", err)
	}
}

// A copy whose process is killed (SIGKILL) in the middle of a table leaves
// the source unharmed and unlocked and the target a prefix; the re-run
// ends with both equal.
func TestKilledCopyResumes(t *testing.T) {
	ctx := context.Background()
	path, src := newSource(t)
	populate(t, src, 1200)
	src.Close() // the copy refuses a file open in another process
	dsn, dst := newTarget(t)
	cmd, line := startChild(t, envChildFrom+"="+path, envChildTo+"="+dsn)
	if !strings.HasPrefix(line, "mid-table") {
		t.Fatalf("child said %q", line)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck // killed
	src = storetest.Open(t, path, storetest.Options{})
	var partial, total int64
	if err := dst.Read.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	if err := src.Read.QueryRow(`SELECT COUNT(*) FROM event_queue`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if partial < 400 || partial >= total {
		t.Fatalf("killed copy left %d of %d event_queue rows", partial, total)
	}
	res, err := Run(ctx, path, dsn, Options{BatchSize: 50})
	if err != nil {
		t.Fatalf("re-run after the kill: %v", err)
	}
	for _, r := range res {
		if r.Table == "event_queue" && r.Copied != total-partial {
			t.Fatalf("re-run copied %d event_queue rows, want the %d missing", r.Copied, total-partial)
		}
	}
	assertSame(t, src, dst)
}

// Run refuses a SQLite file that another process has open (a courier
// still running), before it takes any lock, and copies it once that
// process is gone.
func TestOpenSourceRefused(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("who has a file open is read from /proc/locks: Linux only")
	}
	ctx := context.Background()
	path, src := newSource(t)
	populate(t, src, 0)
	src.Close()
	dsn, _ := newTarget(t)
	cmd, _ := startChild(t, envChildHold+"="+path)
	_, err := Run(ctx, path, dsn, Options{})
	if !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("copy of a file open in process %d: %v", cmd.Process.Pid, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck // killed
	if _, err := Run(ctx, path, dsn, Options{}); err != nil {
		t.Fatalf("copy once the other process is gone: %v", err)
	}
}

// A table the copy does not know, on either side, stops it before it
// writes a row: a future migration's table cannot be forgotten.
func TestUnknownTableFails(t *testing.T) {
	ctx := context.Background()
	for _, side := range []string{"source", "target"} {
		t.Run(side, func(t *testing.T) {
			_, src := newSource(t)
			populate(t, src, 0)
			_, dst := newTarget(t)
			if _, err := migrations.Apply(ctx, dst.Write, migrations.Options{Dialect: migrations.Postgres}); err != nil {
				t.Fatal(err)
			}
			on := src.Write
			if side == "target" {
				on = dst.Write
			}
			execSQL(t, on, `CREATE TABLE future_feature (id BIGINT PRIMARY KEY, note TEXT)`)
			execSQL(t, on, `INSERT INTO future_feature (id, note) VALUES (1, 'must not be lost')`)
			_, err := Copy(ctx, src, dst, Options{})
			if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), `"future_feature"`) || !strings.Contains(err.Error(), side) {
				t.Fatalf("copy with an unknown table on the %s: %v", side, err)
			}
			var n int
			if err := dst.Read.QueryRow(`SELECT COUNT(*) FROM actors`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d actors copied before the refusal (%v)", n, err)
			}
		})
	}
}

// A source at another schema version than the binary's is refused, older
// or newer.
func TestOtherVersionRefused(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ name, sql, want string }{
		{"older", `DELETE FROM schema_migrations WHERE version = (SELECT MAX(version) FROM schema_migrations)`, "courier migrate"},
		{"newer", `INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)`, "newer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, src := newSource(t)
			execSQL(t, src.Write, c.sql)
			_, dst := newTarget(t)
			_, err := Copy(ctx, src, dst, Options{})
			if !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("copy of a source %s than the binary: %v", c.name, err)
			}
		})
	}
}

// A target with rows of another instance is refused; so is one where rows
// the source also has were changed.
func TestForeignTargetRefused(t *testing.T) {
	ctx := context.Background()
	_, src := newSource(t)
	populate(t, src, 0)
	dsn, _ := newTarget(t)
	other, err := storetest.OpenAt(ctx, dsn, storetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := store.New(other, "https://other.example", nil).CreateActor(ctx, store.NewActor{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err = Copy(ctx, src, other, Options{})
	if !errors.Is(err, ErrNotACopy) || !strings.Contains(err.Error(), "actors") {
		t.Fatalf("copy onto another instance's database: %v", err)
	}
}

// The copy takes the source's write lock and holds it: while another
// process writes the file, it refuses to start.
func TestLockedSourceRefused(t *testing.T) {
	ctx := context.Background()
	path, _ := newSource(t)
	// This test is about a SQLite file as such: the copy's handle has a
	// short busy timeout, a second handle holds the write lock.
	src, err := sqlite.Open(ctx, path, sqlite.Options{BusyTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	holder, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.Write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, dst := newTarget(t)
	_, err = Copy(ctx, src, dst, Options{})
	if !errors.Is(err, ErrSource) || !strings.Contains(err.Error(), "stop every courier process") {
		t.Fatalf("copy of a file another process writes: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, Options{}); err != nil {
		t.Fatalf("copy once the lock is free: %v", err)
	}
}
