package inbox

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Emoji reactions: an EmojiReact (or older Pleroma's EmojiReaction), or
// Misskey's Like with an emoji, as activitypub.ReactionOf decides (the
// application's inbox view decides with it too). Either is counted per
// emoji on the local object (store.EmojiCount), once per (actor, object,
// emoji); its Undo, embedded or by id, removes it.

// OutcomeReacted: an emoji reaction of a local object recorded.
const OutcomeReacted = "reacted"

// emojiOf returns the emoji of the reaction document raw of type typ (an
// EmojiReact, or a Like that carries one) and, for a custom emoji, its
// image URL and its Emoji tag's id; "" when raw carries no emoji. A
// Unicode emoji has no image, whatever tag comes with it (the store keeps
// a custom emoji's image only from a reactor of its host).
func emojiOf(typ string, raw json.RawMessage) (emoji, icon, id string) {
	r := activitypub.ReactionOf(typ, raw)
	if r.Kind != activitypub.ReactionEmoji {
		return "", "", ""
	}
	return r.Emoji, r.Icon, r.TagID
}

// isEmojiReaction reports whether act is an emoji reaction (its import is
// react's).
func isEmojiReaction(act *activitypub.Activity) bool {
	e, _, _ := emojiOf(act.Type, act.Raw)
	return e != ""
}

// react records the emoji reaction act of a local object.
func (im *Importer) react(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) (importOutcome, error) {
	emoji, icon, emojiID := emojiOf(act.Type, act.Raw)
	if emoji == "" {
		return refused("an emoji reaction without content"), nil
	}
	o, err := im.st.ObjectByURITx(ctx, tx, act.ObjectID)
	if err != nil {
		return refusal(err, outcomeOf(OutcomeIgnored))
	}
	if !o.Local() || o.Deleted() {
		return outcomeOf(OutcomeIgnored), nil
	}
	added, err := im.st.AddEmojiReactionTx(ctx, tx, store.EmojiReaction{
		ActivityURI: act.ID, ActorURI: act.Actor, ObjectURI: o.URI, Emoji: emoji, Icon: icon, EmojiID: emojiID,
	})
	if err != nil {
		return refusal(err, importOutcome{})
	}
	if !added {
		return outcomeOf(OutcomeNoMatch), nil
	}
	return outcomeOf(OutcomeReacted), nil
}

// undoEmoji applies an Undo of an emoji reaction: of an EmojiReact, of a
// Like that carries an emoji, or of an activity named by id that is an
// emoji reaction. ok is false when the Undo is not about one (a plain
// Like, a Follow): the caller goes on.
func (im *Importer) undoEmoji(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, inner *activitypub.Object, innerType string) (outcome importOutcome, ok bool, err error) {
	r := store.EmojiReaction{ActivityURI: act.ObjectID, ActorURI: act.Actor}
	var emoji string
	switch innerType {
	case "EmojiReact", "EmojiReaction", "Like":
		emoji, _, _ = emojiOf(innerType, inner.Raw)
		if emoji != "" || activitypub.IsEmojiReact(innerType) {
			r.ObjectURI, r.Emoji = inner.ObjectID, emoji
		}
	case "":
	default:
		return importOutcome{}, false, nil
	}
	if r.ActivityURI == "" && r.ObjectURI == "" {
		if activitypub.IsEmojiReact(innerType) {
			return outcomeOf(OutcomeNoMatch), true, nil
		}
		return importOutcome{}, false, nil
	}
	removed, err := im.st.RemoveEmojiReactionTx(ctx, tx, r)
	if err != nil {
		outcome, err = refusal(err, importOutcome{})
		return outcome, true, err
	}
	switch {
	case removed:
		return outcomeOf(OutcomeUndone), true, nil
	case activitypub.IsEmojiReact(innerType) || emoji != "":
		return outcomeOf(OutcomeNoMatch), true, nil
	}
	return importOutcome{}, false, nil // a plain Like, or an id that is no emoji reaction
}
