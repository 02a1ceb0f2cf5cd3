package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
)

// Threads peers can complete: every local object serves its replies (the
// local and remote replies held here) and names its conversation in
// "context" (FEP-7888): a new conversation's is {base}/contexts/{the
// root's local id}; a reply inherits its parent's (a local parent's
// column, a remote parent's "context"), and a reply to an object not held
// starts its own.

// Context is the id of the conversation whose root is the local object
// id: {base}/contexts/{id}.
func (u URIs) Context(id string) string { return u.Base + "/contexts/" + id }

// Replies is the replies collection of the local object id.
func (u URIs) Replies(id string) string { return u.Object(id) + "/replies" }

// conversationTx returns the context a new local object with local id
// localID replying to inReplyTo ("" for none) belongs to.
func (s *Store) conversationTx(ctx context.Context, tx *sql.Tx, localID, inReplyTo string) (string, error) {
	own := s.uris.Context(localID)
	if inReplyTo == "" {
		return own, nil
	}
	var doc string
	var cu sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT document, context_uri FROM objects WHERE uri = ?`, inReplyTo).Scan(&doc, &cu)
	if errors.Is(err, sql.ErrNoRows) {
		return own, nil
	}
	if err != nil {
		return "", err
	}
	if cu.Valid && cu.String != "" {
		return cu.String, nil
	}
	var d struct {
		Context json.RawMessage `json:"context"`
	}
	if json.Unmarshal([]byte(doc), &d) == nil {
		var c string
		if json.Unmarshal(d.Context, &c) == nil && absoluteURL(c) {
			return c, nil
		}
	}
	return own, nil
}

// ThreadItem is one object of a replies or context collection: its id,
// row (the cursor), audience, and local author (0 for a remote one).
type ThreadItem struct {
	RowID   int64
	URI     string
	ActorID int64
	Public  bool // public or unlisted
	To, CC  []string
}

// ThreadPage is a page of a replies or context collection, oldest first.
type ThreadPage struct {
	Items []ThreadItem
	// Total is the number of public and unlisted items.
	Total int
	// Next is the cursor (After) of the next page, 0 when there is none.
	Next int64
}

// Replies returns a page of the objects held (local and remote, not
// deleted) that reply to uri, oldest first: those after the row id after,
// at most limit. The caller filters them by what its reader may see.
func (s *Store) Replies(ctx context.Context, uri string, after int64, limit int) (*ThreadPage, error) {
	return s.threadPage(ctx, `in_reply_to = ?`, []any{uri}, after, limit)
}

// Conversation returns a page of the objects held of the conversation
// contextURI: the local objects in it and the replies held to them.
func (s *Store) Conversation(ctx context.Context, contextURI string, after int64, limit int) (*ThreadPage, error) {
	return s.threadPage(ctx, `(context_uri = ? OR in_reply_to IN (SELECT uri FROM objects WHERE context_uri = ?))`,
		[]any{contextURI, contextURI}, after, limit)
}

// ConversationExists reports whether a local object belongs to contextURI.
func (s *Store) ConversationExists(ctx context.Context, contextURI string) (bool, error) {
	var n int
	err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM objects WHERE context_uri = ?`, contextURI).Scan(&n)
	return n > 0, wrap("conversation", err)
}

func (s *Store) threadPage(ctx context.Context, where string, args []any, after int64, limit int) (*ThreadPage, error) {
	const alive = ` AND deleted_at IS NULL`
	p := &ThreadPage{}
	if err := s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM objects WHERE `+where+alive+
		` AND visibility IN ('public', 'unlisted')`, args...).Scan(&p.Total); err != nil {
		return nil, wrap("thread", err)
	}
	limit = clampLimit(limit)
	rows, err := s.db.Read.QueryContext(ctx, `SELECT id, uri, COALESCE(actor_id, 0), visibility, to_json, cc_json
		FROM objects WHERE `+where+alive+` AND id > ? ORDER BY id LIMIT ?`, append(args, after, limit+1)...)
	if err != nil {
		return nil, wrap("thread", err)
	}
	defer rows.Close()
	for rows.Next() {
		var it ThreadItem
		var vis, to, cc string
		if err := rows.Scan(&it.RowID, &it.URI, &it.ActorID, &vis, &to, &cc); err != nil {
			return nil, wrap("thread", err)
		}
		it.Public = vis == VisibilityPublic || vis == VisibilityUnlisted
		it.To, it.CC = unmarshalList(to), unmarshalList(cc)
		p.Items = append(p.Items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("thread", err)
	}
	if len(p.Items) > limit {
		p.Items = p.Items[:limit]
		p.Next = p.Items[limit-1].RowID
	}
	return p, nil
}
