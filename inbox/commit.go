package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
)

// EventReceived is the outbox event type of a recorded inbound activity. Its
// payload is a Received.
const EventReceived = "inbox.received"

// HandlerImport is the ledger name of the import handler of EventReceived.
// Keep it stable: the ledger records handlers by name.
const HandlerImport = "inbox.import"

// Received is the payload of an EventReceived event: which recorded activity
// to import. The activity itself is read from inbox_activities.
type Received struct {
	// ActivityID is the ActivityPub id of the activity.
	ActivityID string `json:"activity_id"`
}

// eventSpace is the UUID namespace of inbound event ids.
var eventSpace = uuid.MustParse("9a4f0c6e-2b7d-5e31-8c45-71d2e8b3f0a6")

// EventID returns the id of the EventReceived event of the activity with
// ActivityPub id activityID: a name-based UUID, so a duplicate delivery of
// the activity, even one racing the first, cannot enqueue a second event.
func EventID(activityID string) string {
	return uuid.NewSHA1(eventSpace, []byte(activityID)).String()
}

// record is one verified activity to store.
type record struct {
	activityID string
	typ        string
	actor      string
	objectID   string
	inbox      string
	keyID      string
	document   []byte
	receivedAt time.Time
}

const sqlInsertActivity = `INSERT INTO inbox_activities
	(activity_id, type, actor, object_id, inbox, key_id, event_id, document, received_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (activity_id) DO NOTHING`

// recorder stores records with group commit (an outbox.Group): the writes
// of concurrent requests share one transaction (one fsync), and a record
// that fails its group is written again alone.
type recorder struct {
	// insert is sqlInsertActivity, prepared once on the writer; each
	// group's transaction uses it through Tx.StmtContext.
	insert *sql.Stmt
	group  *outbox.Group[*recordOp]
}

type recordOp struct {
	rec record
	dup bool // the activity was already recorded
}

// groupTimeout bounds the database work of one group.
const groupTimeout = 30 * time.Second

// newRecorder prepares the recorder's statement on db's writer. The
// statement lives as long as db. Its transactions are db's (db.Tx), so
// db's after-write hooks run after each commit.
func newRecorder(db *sqldb.DB, maxGroup int) (*recorder, error) {
	insert, err := db.Write.PrepareContext(context.Background(), sqlInsertActivity)
	if err != nil {
		return nil, fmt.Errorf("inbox: prepare record: %w", err)
	}
	c := &recorder{insert: insert}
	c.group, err = outbox.NewGroup(outbox.GroupConfig{Tx: db.Tx, MaxSize: maxGroup, Timeout: groupTimeout}, c.insertRecords)
	if err != nil {
		_ = insert.Close()
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return c, nil
}

// store records rec and enqueues its event. It reports whether rec was a
// duplicate of a recorded activity.
func (c *recorder) store(ctx context.Context, rec record) (bool, error) {
	op := &recordOp{rec: rec}
	if err := c.group.Do(ctx, op); err != nil {
		return false, err
	}
	return op.dup, nil
}

// insertRecords inserts the records of ops and the events of the new ones,
// in tx. A record whose id is already stored is a duplicate: no event.
func (c *recorder) insertRecords(ctx context.Context, tx *sql.Tx, ops []*recordOp) error {
	stmt := tx.StmtContext(ctx, c.insert)
	defer stmt.Close()
	events := make([]outbox.Event, 0, len(ops))
	exec := stmt.ExecContext
	for _, o := range ops {
		ev, isNew, err := o.rec.insert(ctx, exec)
		if err != nil {
			return fmt.Errorf("inbox: record %s: %w", o.rec.activityID, err)
		}
		o.dup = !isNew
		if isNew {
			events = append(events, ev)
		}
	}
	return outbox.Enqueue(ctx, tx, events...)
}

// insert inserts r through exec, which runs sqlInsertActivity with the
// arguments given, and returns its EventReceived event to enqueue; isNew
// is false, and the event zero, when r's activity was recorded before.
func (r record) insert(ctx context.Context, exec func(ctx context.Context, args ...any) (sql.Result, error)) (ev outbox.Event, isNew bool, err error) {
	evID := EventID(r.activityID)
	var object any
	if r.objectID != "" {
		object = r.objectID
	}
	res, err := exec(ctx, r.activityID, r.typ, r.actor, object, r.inbox, r.keyID, evID,
		string(r.document), r.receivedAt.UnixMilli())
	if err != nil {
		return ev, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return ev, false, err
	}
	payload, err := receivedPayload(r.activityID)
	if err != nil {
		return ev, false, err
	}
	return outbox.Event{ID: evID, Type: EventReceived, Payload: payload, OccurredAt: r.receivedAt}, true, nil
}

// receivedPayload returns the JSON of Received{ActivityID: id}, the bytes
// json.Marshal gives. An id of printable ASCII that JSON does not escape
// (no quote, backslash or HTML character: almost every URL) is written
// as it is, without reflection.
func receivedPayload(id string) ([]byte, error) {
	const prefix, suffix = `{"activity_id":"`, `"}`
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return json.Marshal(Received{ActivityID: id})
		}
	}
	b := make([]byte, 0, len(prefix)+len(id)+len(suffix))
	b = append(b, prefix...)
	b = append(b, id...)
	return append(b, suffix...), nil
}
