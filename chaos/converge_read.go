package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/postgres"
)

// readExpected reads courier's state as the remote hosts should see it:
// its local objects (their version, or deleted) with the hosts following
// their authors, the Likes that stand (by the hosts they are addressed
// to), and the Follows that stand (by their target's host).
func readExpected(ctx context.Context, db *checkDB, w *world, hosts []string) (*expectedView, error) {
	want := newExpectedView(hosts)
	queries := []struct {
		name, sql string
		scan      func(*sql.Rows) error
	}{
		{"objects", `SELECT uri, attributed_to, content, deleted_at IS NOT NULL FROM objects WHERE actor_id IS NOT NULL`,
			func(r *sql.Rows) error {
				var uri, author, content string
				var deleted bool
				if err := r.Scan(&uri, &author, &content, &deleted); err != nil {
					return err
				}
				v := contentVersion(content)
				if v < 0 && !deleted {
					return nil // not a convergence write
				}
				want.objects[uri] = objectState{version: v, deleted: deleted}
				for h := range w.followerHosts[author] {
					want.audience[uri] = append(want.audience[uri], h)
				}
				return nil
			}},
		{"reactions", `SELECT r.actor_uri, r.object_uri, a.document FROM reactions r
			JOIN activities a ON a.uri = r.activity_uri WHERE r.type = 'Like' AND a.actor_id IS NOT NULL`,
			func(r *sql.Rows) error {
				var actor, object, doc string
				if err := r.Scan(&actor, &object, &doc); err != nil {
					return err
				}
				var d struct {
					To json.RawMessage `json:"to"`
					Cc json.RawMessage `json:"cc"`
				}
				if err := json.Unmarshal([]byte(doc), &d); err != nil {
					return fmt.Errorf("the Like of %s by %s: %w", object, actor, err)
				}
				// A Like reaches those it is addressed to and the liked
				// note's author (on the note's host), whom courier finds
				// when the Like's addressing does not name them.
				for _, id := range append(activitypub.IDs(d.To), append(activitypub.IDs(d.Cc), object)...) {
					if h := hostOf(id); h != "" {
						addRelation(want.likes, h, relation{actor, object})
					}
				}
				return nil
			}},
		{"following", `SELECT a.actor_uri, f.target_uri FROM following f JOIN activities a ON a.uri = f.follow_activity_id`,
			func(r *sql.Rows) error {
				var actor, target string
				if err := r.Scan(&actor, &target); err != nil {
					return err
				}
				addRelation(want.follows, hostOf(target), relation{actor, target})
				return nil
			}},
	}
	for _, q := range queries {
		text := q.sql
		if db.postgres {
			text = postgres.Rebind(text)
		}
		if err := scanRows(ctx, db, q.name, text, nil, q.scan); err != nil {
			return nil, err
		}
	}
	return want, nil
}

// arrivalsOf turns the inboxes' records into the checker's arrivals.
func arrivalsOf(posts []post) []arrival {
	out := make([]arrival, 0, len(posts))
	for _, p := range posts {
		a := arrival{host: p.host, typ: p.typ, id: p.activityID, actor: p.actor, object: p.objectID, version: p.version}
		if p.typ == "Undo" {
			a.undoneType, a.undoneObject = p.undoneType, p.undoneObject
		}
		out = append(out, a)
	}
	return out
}

// fillConvergence puts the convergence check's outcome in the report.
func (r *Report) fillConvergence(c convergence, st convergeStats) {
	r.Converge = true
	r.Stories, r.StoriesDone = st.Stories, st.Done
	r.ConvergeWrites, r.ConvergeAcked, r.ConvergeUnanswered, r.ConvergeRefused = st.Writes, st.Acked, st.Unanswered, st.Refused
	r.NoNoteToLike = st.Gap
	r.Arrivals = c.Arrivals
	r.ViewDivergences, r.OrderViolations = c.ViewDivergences, c.OrderViolations
	r.Resurrected, r.LostEdits, r.MissingObjects, r.RelationDivergences = c.Resurrected, c.LostEdits, c.Missing, c.Relations
	r.FirstDivergences = c.First
}
