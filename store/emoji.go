package store

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/courier-ap/courier/activitypub"
)

// This file holds emoji reactions: EmojiReact (honk, Pleroma, Akkoma) and
// Misskey's Like with a reaction, of local objects by remote actors
// (migration 0026). A plain Like stays a Like in reactions.

// MaxEmojiLen bounds an emoji reaction's content, in bytes: a Unicode
// emoji sequence or a custom emoji's :shortcode:.
const MaxEmojiLen = 256

// The bounds of emoji reactions, so that no actor, nor many, can grow an
// object's document without end: an actor's reactions on one object, the
// distinct emoji of one object (a custom emoji of each host counts apart),
// and the length of a custom emoji's image URL. A reaction past either
// count, or with a longer image URL, is refused (EUNPROCESSABLE); the same
// emoji again is no new reaction.
const (
	MaxEmojiPerActor  = 8
	MaxEmojiPerObject = 64
	MaxEmojiIconLen   = 512
)

// CustomEmoji reports whether emoji is a custom emoji's :shortcode: rather
// than a Unicode emoji.
func CustomEmoji(emoji string) bool {
	return activitypub.IsCustomEmoji(emoji)
}

// EmojiReaction is one emoji reaction of an object.
type EmojiReaction struct {
	ActivityURI string
	ActorURI    string
	ObjectURI   string
	// Emoji is the reaction: a Unicode emoji, or a custom emoji's
	// :shortcode: whose image is Icon. A custom emoji is its reactor's
	// host's: Icon is kept only when it, or the emoji's own id EmojiID,
	// is on the host of ActorURI. A Unicode emoji has no image.
	Emoji   string
	Icon    string
	EmojiID string
}

// EmojiCount is how many actors reacted to an object with one emoji.
type EmojiCount struct {
	Emoji string
	Icon  string // a custom emoji's image URL, "" for a Unicode emoji
	Count int
}

// AddEmojiReactionTx records r in tx. A repeated activity, or the same
// emoji by the same actor on the same object, is ignored; it reports
// whether r is new. It refuses a reaction past MaxEmojiPerActor or
// MaxEmojiPerObject, or with an image URL over MaxEmojiIconLen bytes
// (EUNPROCESSABLE).
func (s *Store) AddEmojiReactionTx(ctx context.Context, tx *sql.Tx, r EmojiReaction) (bool, error) {
	if r.ActivityURI == "" || r.ActorURI == "" || r.ObjectURI == "" || r.Emoji == "" {
		return false, Errorf(EINVALID, "an emoji reaction needs an activity, an actor, an object and an emoji")
	}
	if len(r.Emoji) > MaxEmojiLen || !utf8.ValidString(r.Emoji) {
		return false, Errorf(EINVALID, "the emoji is not UTF-8 of at most %d bytes", MaxEmojiLen)
	}
	host := ""
	if CustomEmoji(r.Emoji) {
		host = urlHost(r.ActorURI)
		if len(r.Icon) > MaxEmojiIconLen {
			return false, Errorf(EUNPROCESSABLE, "a custom emoji's image URL is at most %d bytes", MaxEmojiIconLen)
		}
		if host == "" || (urlHost(r.Icon) != host && urlHost(r.EmojiID) != host) {
			r.Icon = "" // another server's image for this host's emoji is not shown
		}
	} else {
		r.Icon = ""
	}
	var mine, same int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN emoji = ? THEN 1 ELSE 0 END), 0)
		FROM emoji_reactions WHERE actor_uri = ? AND object_uri = ?`, r.Emoji, r.ActorURI, r.ObjectURI).Scan(&mine, &same); err != nil {
		return false, wrap("add emoji reaction", err)
	}
	if same > 0 {
		return false, nil
	}
	if mine >= MaxEmojiPerActor {
		return false, Errorf(EUNPROCESSABLE, "an actor has at most %d emoji reactions on one object", MaxEmojiPerActor)
	}
	var known int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM emoji_reactions WHERE object_uri = ? AND emoji = ? AND emoji_host = ?`,
		r.ObjectURI, r.Emoji, host).Scan(&known); err != nil {
		return false, wrap("add emoji reaction", err)
	}
	if known == 0 {
		var distinct int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT DISTINCT emoji, emoji_host FROM emoji_reactions
			WHERE object_uri = ? LIMIT ?) d`, r.ObjectURI, MaxEmojiPerObject).Scan(&distinct); err != nil {
			return false, wrap("add emoji reaction", err)
		}
		if distinct >= MaxEmojiPerObject {
			return false, Errorf(EUNPROCESSABLE, "an object has at most %d distinct emoji reactions", MaxEmojiPerObject)
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO emoji_reactions (activity_uri, actor_uri, object_uri, emoji, emoji_icon, emoji_host, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, r.ActivityURI, r.ActorURI, r.ObjectURI, r.Emoji, r.Icon, host, ms(s.clock()))
	if err != nil {
		return false, wrap("add emoji reaction", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// urlHost is the lower-cased host (with its port) of an absolute URL; ""
// when it has none.
func urlHost(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// RemoveEmojiReactionTx removes an emoji reaction by r.ActorURI in tx (an
// Undo): the one with activity id r.ActivityURI, or else, when r.Emoji and
// r.ObjectURI are given, the one of that emoji on that object, or, with
// r.ObjectURI alone, every emoji reaction of the actor on the object
// (Misskey's Undo of its Like names the object, one reaction per note). A
// reaction by another actor is never removed. It reports whether a row was
// removed.
func (s *Store) RemoveEmojiReactionTx(ctx context.Context, tx *sql.Tx, r EmojiReaction) (bool, error) {
	if r.ActorURI == "" {
		return false, Errorf(EINVALID, "an emoji reaction's undo needs the actor")
	}
	if r.ActivityURI != "" {
		res, err := tx.ExecContext(ctx, `DELETE FROM emoji_reactions WHERE activity_uri = ? AND actor_uri = ?`, r.ActivityURI, r.ActorURI)
		if err != nil {
			return false, wrap("remove emoji reaction", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return true, nil
		}
	}
	if r.ObjectURI == "" {
		return false, nil
	}
	q, args := `DELETE FROM emoji_reactions WHERE actor_uri = ? AND object_uri = ?`, []any{r.ActorURI, r.ObjectURI}
	if r.Emoji != "" {
		q, args = q+` AND emoji = ?`, append(args, r.Emoji)
	}
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return false, wrap("remove emoji reaction", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// EmojiCounts returns objectURI's emoji reactions counted per emoji (a
// custom emoji per its host, with an image its host's reactors gave), the
// most frequent first (ties by emoji), at most MaxEmojiPerObject.
func (s *Store) EmojiCounts(ctx context.Context, objectURI string) ([]EmojiCount, error) {
	rows, err := s.db.Read.QueryContext(ctx, `SELECT emoji, MAX(emoji_icon), COUNT(*) FROM emoji_reactions
		WHERE object_uri = ? GROUP BY emoji, emoji_host ORDER BY COUNT(*) DESC, emoji, emoji_host LIMIT ?`,
		objectURI, MaxEmojiPerObject)
	if err != nil {
		return nil, wrap("emoji counts", err)
	}
	defer rows.Close()
	var out []EmojiCount
	for rows.Next() {
		var c EmojiCount
		if err := rows.Scan(&c.Emoji, &c.Icon, &c.Count); err != nil {
			return nil, wrap("emoji counts", err)
		}
		out = append(out, c)
	}
	return out, wrap("emoji counts", rows.Err())
}

// forgetObjectTx removes, in tx, what hangs off the object uri besides its
// Likes and Announces once it is deleted: its emoji reactions and its
// places in featured collections.
func (s *Store) forgetObjectTx(ctx context.Context, tx *sql.Tx, uri string) error {
	for _, q := range []string{
		`DELETE FROM emoji_reactions WHERE object_uri = ?`,
		`DELETE FROM featured WHERE object_uri = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, uri); err != nil {
			return wrap("forget object", err)
		}
	}
	return nil
}
