package activitypub

import (
	"encoding/json"
	"strings"
)

// Reactions. The shapes of a reaction to an object:
//
//   - Like: a like, unless it carries an emoji (below);
//   - Announce: a boost;
//   - Dislike;
//   - an emoji reaction: EmojiReact (honk, Pleroma, Akkoma; older Pleroma
//     named it EmojiReaction), whose "content" is the emoji, a Unicode one
//     or a custom one's :shortcode:, whose image is the "tag" entry of type
//     Emoji with that name ("icon": an Image with "url"); or Misskey's Like
//     with "_misskey_reaction" (and "content", the same emoji).
//
// ReactionOf decides them, for the inbox's import and the application's
// inbox view alike.

// Reaction kinds, as ReactionOf reports them.
const (
	ReactionLike     = "like"
	ReactionAnnounce = "announce"
	ReactionDislike  = "dislike"
	ReactionEmoji    = "emoji"
)

// Reaction is what ReactionOf makes of an activity.
type Reaction struct {
	// Kind is one of the Reaction kinds; "" when the activity is no
	// reaction.
	Kind string
	// Emoji is an emoji reaction's emoji ("" for an EmojiReact without
	// one, which is still an emoji reaction, and a malformed one).
	Emoji string
	// Icon is the image URL of a custom emoji, when its tag gives one; a
	// Unicode emoji has none, whatever tag comes with it.
	Icon string
	// TagID is the id of a custom emoji's Emoji tag, when it has one (the
	// store keeps a custom emoji's image only from a reactor of its host).
	TagID string
}

// IsEmojiReact reports whether typ is a type of an emoji reaction that is
// not a Like: EmojiReact, or older Pleroma's EmojiReaction.
func IsEmojiReact(typ string) bool { return typ == "EmojiReact" || typ == "EmojiReaction" }

// ReactionOf returns the reaction an activity of type typ with document raw
// is: a Like that carries an emoji is an emoji reaction, one without stays
// a like.
func ReactionOf(typ string, raw json.RawMessage) Reaction {
	switch {
	case typ == "Announce":
		return Reaction{Kind: ReactionAnnounce}
	case typ == "Dislike":
		return Reaction{Kind: ReactionDislike}
	case typ != "Like" && !IsEmojiReact(typ):
		return Reaction{}
	}
	emoji, icon, id := emojiOf(raw)
	if emoji == "" && typ == "Like" {
		return Reaction{Kind: ReactionLike}
	}
	return Reaction{Kind: ReactionEmoji, Emoji: emoji, Icon: icon, TagID: id}
}

// reactionWire is the part of a reaction's document ReactionOf reads.
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

// emojiOf returns the emoji a reaction document carries and, for a custom
// emoji (a :shortcode:), its image URL and its Emoji tag's id; "" when it
// carries none.
func emojiOf(raw json.RawMessage) (emoji, icon, id string) {
	var w reactionWire
	if json.Unmarshal(raw, &w) != nil {
		return "", "", ""
	}
	emoji = strings.TrimSpace(jsonString(w.MisskeyReaction))
	if emoji == "" {
		emoji = strings.TrimSpace(jsonString(w.Content))
	}
	if !IsCustomEmoji(emoji) {
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

// IsCustomEmoji reports whether emoji is a custom emoji's :shortcode:
// rather than a Unicode emoji.
func IsCustomEmoji(emoji string) bool {
	return len(emoji) > 2 && strings.HasPrefix(emoji, ":") && strings.HasSuffix(emoji, ":")
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
	if ids := IDs(img.URL); len(ids) > 0 {
		return ids[0]
	}
	return ""
}
