package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Emoji reactions. Two shapes reach the inbox:
//
//   - EmojiReact (honk, Pleroma, Akkoma; older Pleroma named it
//     EmojiReaction, still read): "content" is the emoji, a
//     Unicode one or a custom one's :shortcode:, whose image is the "tag"
//     entry of type Emoji with that name ("icon": an Image with "url").
//   - Misskey's Like with "_misskey_reaction" (and "content", the same
//     emoji): a Like that carries an emoji is an emoji reaction; a Like
//     without one stays a Like.
//
// Either is counted per emoji on the local object (store.EmojiCount),
// once per (actor, object, emoji); its Undo, embedded or by id, removes it.

// OutcomeReacted: an emoji reaction of a local object recorded.
const OutcomeReacted = "reacted"

// emojiReactTypes are the types of an emoji reaction that is not a Like.
var emojiReactTypes = map[string]bool{"EmojiReact": true, "EmojiReaction": true}

// reactionWire is the part of a reaction's document read here.
type reactionWire struct {
	Content         json.RawMessage `json:"content"`
	MisskeyReaction json.RawMessage `json:"_misskey_reaction"`
	Tag             json.RawMessage `json:"tag"`
}

// emojiTag is a tag entry that may be a custom emoji.
type emojiTag struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Name string          `json:"name"`
	Icon json.RawMessage `json:"icon"`
}

// emojiOf returns the emoji of the reaction document raw of type typ (an
// EmojiReact, or a Like that carries one) and, for a custom emoji, its
// image URL and its Emoji tag's id; "" when raw carries no emoji. A
// Unicode emoji has no image, whatever tag comes with it (the store keeps
// a custom emoji's image only from a reactor of its host).
func emojiOf(typ string, raw json.RawMessage) (emoji, icon, id string) {
	if !emojiReactTypes[typ] && typ != "Like" {
		return "", "", ""
	}
	var w reactionWire
	if json.Unmarshal(raw, &w) != nil {
		return "", "", ""
	}
	emoji = strings.TrimSpace(jsonString(w.MisskeyReaction))
	if emoji == "" {
		emoji = strings.TrimSpace(jsonString(w.Content))
	}
	if emoji == "" || !store.CustomEmoji(emoji) {
		return emoji, "", ""
	}
	for _, t := range tagList(w.Tag) {
		if t.Type != "Emoji" || !sameShortcode(t.Name, emoji) {
			continue
		}
		if u := iconURL(t.Icon); strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
			icon = u
		}
		id = t.ID
		break
	}
	return emoji, icon, id
}

// sameShortcode compares custom emoji names with or without their colons
// (Misskey writes :name@host: in the reaction and :name: in the tag).
func sameShortcode(a, b string) bool {
	trim := func(s string) string {
		s = strings.Trim(s, ":")
		s, _, _ = strings.Cut(s, "@")
		return s
	}
	return trim(a) == trim(b)
}

func jsonString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// tagList reads "tag" as a list or a single object.
func tagList(raw json.RawMessage) []emojiTag {
	var l []emojiTag
	if json.Unmarshal(raw, &l) == nil {
		return l
	}
	var one emojiTag
	if json.Unmarshal(raw, &one) == nil {
		return []emojiTag{one}
	}
	return nil
}

// iconURL reads an icon: an Image with url (a string or a Link), or a URL.
func iconURL(raw json.RawMessage) string {
	if s := jsonString(raw); s != "" {
		return s
	}
	var img struct {
		URL json.RawMessage `json:"url"`
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) == nil && len(l) > 0 {
		return iconURL(l[0])
	}
	if json.Unmarshal(raw, &img) != nil {
		return ""
	}
	if ids := activitypub.IDs(img.URL); len(ids) > 0 {
		return ids[0]
	}
	return ""
}

// isEmojiReaction reports whether act is an emoji reaction (its import is
// react's).
func isEmojiReaction(act *activitypub.Activity) bool {
	e, _, _ := emojiOf(act.Type, act.Raw)
	return e != ""
}

// react records the emoji reaction act of a local object.
func (im *Importer) react(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) (string, error) {
	emoji, icon, emojiID := emojiOf(act.Type, act.Raw)
	if emoji == "" {
		return "refused: an emoji reaction without content", nil
	}
	o, err := im.st.ObjectByURITx(ctx, tx, act.ObjectID)
	if err != nil {
		return refusal(err, OutcomeIgnored)
	}
	if !o.Local() || o.Deleted() {
		return OutcomeIgnored, nil
	}
	added, err := im.st.AddEmojiReactionTx(ctx, tx, store.EmojiReaction{
		ActivityURI: act.ID, ActorURI: act.Actor, ObjectURI: o.URI, Emoji: emoji, Icon: icon, EmojiID: emojiID,
	})
	if err != nil {
		return refusal(err, "")
	}
	if !added {
		return OutcomeNoMatch, nil
	}
	return OutcomeReacted, nil
}

// undoEmoji applies an Undo of an emoji reaction: of an EmojiReact, of a
// Like that carries an emoji, or of an activity named by id that is an
// emoji reaction. ok is false when the Undo is not about one (a plain
// Like, a Follow): the caller goes on.
func (im *Importer) undoEmoji(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, inner *activitypub.Object, innerType string) (outcome string, ok bool, err error) {
	r := store.EmojiReaction{ActivityURI: act.ObjectID, ActorURI: act.Actor}
	var emoji string
	switch innerType {
	case "EmojiReact", "EmojiReaction", "Like":
		emoji, _, _ = emojiOf(innerType, inner.Raw)
		if emoji != "" || emojiReactTypes[innerType] {
			r.ObjectURI, r.Emoji = inner.ObjectID, emoji
		}
	case "":
	default:
		return "", false, nil
	}
	if r.ActivityURI == "" && r.ObjectURI == "" {
		if emojiReactTypes[innerType] {
			return OutcomeNoMatch, true, nil
		}
		return "", false, nil
	}
	removed, err := im.st.RemoveEmojiReactionTx(ctx, tx, r)
	if err != nil {
		outcome, err = refusal(err, "")
		return outcome, true, err
	}
	switch {
	case removed:
		return OutcomeUndone, true, nil
	case emojiReactTypes[innerType] || emoji != "":
		return OutcomeNoMatch, true, nil
	}
	return "", false, nil // a plain Like, or an id that is no emoji reaction
}
