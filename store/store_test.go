package store

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/migrations"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

const testBase = "https://courier.test"

// testKey is generated once: RSA-2048 generation is slow under -race, and
// the tests of this package do not depend on actors having distinct keys
// (TestCreateActorGeneratesKey checks the real generator).
var testKey = sync.OnceValues(activitypub.GenerateKey)

// testClock is an injected clock that tests advance by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type testBundle struct {
	ctx   context.Context
	db    *sqldb.DB
	store *Store
	clock *testClock
}

// setup opens a fresh store (storetest: a SQLite file, or a PostgreSQL
// database with COURIER_TEST_STORE=postgres), migrated by the real runner.
// synchronous=NORMAL keeps the many small commits of a test fast;
// durability across power loss is not what these tests check.
func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	db := storetest.Open(t, storetest.Location(t), storetest.Options{Synchronous: "NORMAL"})
	clock := &testClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	st := New(db, testBase+"/", clock.Now)
	st.newKey = func() (*rsa.PrivateKey, error) { return testKey() }
	return &testBundle{ctx: ctx, db: db, store: st, clock: clock}
}

func (b *testBundle) actor(t *testing.T, name string) *Actor {
	t.Helper()
	a, _, err := b.store.CreateActor(b.ctx, NewActor{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// count runs a COUNT query on the writer (which sees every commit).
func (b *testBundle) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.Write.QueryRowContext(b.ctx, q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventRow is one event_queue row as a test reads it.
type eventRow struct {
	ID, Type, Status string
	Payload          []byte
	OccurredAt       int64
}

func (b *testBundle) event(t *testing.T, id string) eventRow {
	t.Helper()
	var e eventRow
	var payload string
	err := b.db.Write.QueryRowContext(b.ctx, `SELECT event_id, type, status, payload, occurred_at FROM event_queue_payloads WHERE event_id = ?`, id).
		Scan(&e.ID, &e.Type, &e.Status, &payload, &e.OccurredAt)
	if err != nil {
		t.Fatalf("event %s: %v", id, err)
	}
	e.Payload = []byte(payload)
	return e
}

// checkOutgoing asserts the invariant of every local write: the activity's
// event is in the outbox, carries the actor and the stored bytes, and the
// activity id derives from the event id.
func (b *testBundle) checkOutgoing(t *testing.T, act *Activity, typ string) activitypub.Outgoing {
	t.Helper()
	if act.Type != typ {
		t.Fatalf("activity type %q, want %q", act.Type, typ)
	}
	if want := activitypub.ActivityID(testBase, act.EventID, typ); act.URI != want {
		t.Fatalf("activity id %s, want %s (derived from event %s)", act.URI, want, act.EventID)
	}
	ev := b.event(t, act.EventID)
	if ev.Type != activitypub.EventOutgoing || ev.Status != "pending" {
		t.Fatalf("event %+v", ev)
	}
	var out activitypub.Outgoing
	if err := json.Unmarshal(ev.Payload, &out); err != nil {
		t.Fatal(err)
	}
	stored, err := b.store.ActivityByURI(b.ctx, act.URI)
	if err != nil {
		t.Fatal(err)
	}
	if out.Actor != act.ActorURI || !bytes.Equal(out.Activity, stored.Document) || !bytes.Equal(stored.Document, act.Document) {
		t.Fatalf("payload %s does not carry the stored activity %s", ev.Payload, stored.Document)
	}
	// Rebuilding from the event alone gives the same bytes.
	parsed, err := activitypub.ParseActivity(out.Activity)
	if err != nil {
		t.Fatal(err)
	}
	var obj any = parsed.ObjectRaw
	if s := strings.TrimSpace(string(parsed.ObjectRaw)); strings.HasPrefix(s, `"`) {
		obj = parsed.ObjectID
	}
	if raw, ok := obj.(json.RawMessage); ok {
		obj = raw
	}
	at := time.UnixMilli(ev.OccurredAt)
	// A local object's Create and Update carry its whole @context
	// (ObjectContext); every other activity ActivityStreams alone.
	var ldContext any
	if typ == "Create" || typ == "Update" {
		if o, err := b.store.ObjectByURI(b.ctx, parsed.ObjectID); err == nil && o.Local() {
			ldContext = ObjectContext(o.Context)
		}
	}
	rebuilt, _, err := activitypub.NewActivityContext(activitypub.WithDataIntegrity(ldContext), testBase, ev.ID, typ, out.Actor, obj, "",
		nilIfEmpty(parsed.To), nilIfEmpty(parsed.Cc), at)
	if err != nil {
		t.Fatal(err)
	}
	// The proof is made with the actor's Ed25519 key, deterministically.
	author, err := b.store.ActorByURI(b.ctx, out.Actor)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt, err = activitypub.AddProof(rebuilt, activitypub.Ed25519KeyID(out.Actor), author.Ed25519Key, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rebuilt, out.Activity) {
		t.Fatalf("rebuilt activity differs:\n%s\n%s", rebuilt, out.Activity)
	}
	return out
}

func nilIfEmpty(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return l
}

// migrationOptions runs the migrations of the store the tests use.
func migrationOptions() migrations.Options {
	if storetest.Dialect() == sqldb.Postgres {
		return migrations.Options{Dialect: migrations.Postgres}
	}
	return migrations.Options{Dialect: migrations.SQLite}
}

func TestMain(m *testing.M) { os.Exit(storetest.Main(m)) }
