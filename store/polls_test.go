package store

import (
	"database/sql"
	"encoding/json"
	"testing"
	"time"
)

// TestPollUpdatesDebounced: the votes of one minute schedule one Update
// of the poll, due at the minute's end; a vote of the next minute schedules
// the next. Publishing an event twice sends one Update, with the counts.
func TestPollUpdatesDebounced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.actor(t, "alice")
	// The outbox dates events by the real clock and a due time after it
	// only: the votes are cast a year ahead of it, at :10 past a minute.
	b.clock.Advance(365*24*time.Hour + 10*time.Second)
	minute := b.clock.Now().Truncate(time.Minute).Add(time.Minute).UnixMilli()
	_, q, err := b.store.CreateObject(b.ctx, alice, ObjectInput{Type: "Question", Content: "?", To: []string{Public},
		Properties: map[string]any{"content": "?", "anyOf": []any{map[string]any{"name": "a"}, map[string]any{"name": "b"}}}})
	if err != nil {
		t.Fatal(err)
	}
	vote := func(voter, option string) bool {
		t.Helper()
		var counted bool
		err := b.db.Tx(b.ctx, func(tx *sql.Tx) error {
			var err error
			counted, err = b.store.VoteTx(b.ctx, tx, Vote{Question: q.URI, Voter: "https://r.test/users/" + voter,
				Option: option, ActivityURI: "https://r.test/votes/" + voter + option})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return counted
	}
	type due struct {
		id       string
		notBefor int64
	}
	scheduled := func() []due {
		t.Helper()
		rows, err := b.db.Write.QueryContext(b.ctx, `SELECT event_id, next_attempt_at FROM event_queue WHERE type = ? ORDER BY next_attempt_at`, EventPollUpdate)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []due
		for rows.Next() {
			var d due
			if err := rows.Scan(&d.id, &d.notBefor); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	for _, v := range [][2]string{{"v1", "a"}, {"v2", "a"}, {"v2", "b"}} {
		if !vote(v[0], v[1]) {
			t.Fatalf("%v not counted", v)
		}
		b.clock.Advance(10 * time.Second)
	}
	if vote("v1", "a") {
		t.Fatal("the same option counted twice")
	}
	if d := scheduled(); len(d) != 1 || d[0].notBefor != minute {
		t.Fatalf("after a minute's votes: %+v, want one Update due at %d", d, minute)
	}
	b.clock.Advance(time.Minute) // :50 past the next minute
	if !vote("v3", "b") {
		t.Fatal("v3 not counted")
	}
	d := scheduled()
	if len(d) != 2 || d[1].notBefor != minute+time.Minute.Milliseconds() {
		t.Fatalf("after the next minute's vote: %+v", d)
	}
	for range 2 {
		if err := b.store.PublishPollCounts(b.ctx, d[0].id, q.URI); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count(t, `SELECT COUNT(*) FROM activities WHERE type = 'Update' AND object_uri = ?`, q.URI); n != 1 {
		t.Fatalf("%d Updates for one event", n)
	}
	var doc string
	if err := b.db.Write.QueryRowContext(b.ctx, `SELECT document FROM activities WHERE type = 'Update' AND object_uri = ?`, q.URI).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var act struct {
		Object struct {
			VotersCount int `json:"votersCount"`
			AnyOf       []struct {
				Name    string
				Replies struct{ TotalItems int }
			} `json:"anyOf"`
		} `json:"object"`
	}
	if err := json.Unmarshal([]byte(doc), &act); err != nil {
		t.Fatal(err)
	}
	if o := act.Object; o.VotersCount != 3 || o.AnyOf[0].Replies.TotalItems != 2 || o.AnyOf[1].Replies.TotalItems != 2 {
		t.Fatalf("Update %s", doc)
	}
}
