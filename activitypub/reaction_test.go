package activitypub

import "testing"

// TestReactionOf: the one decision of reaction shapes that the import and
// the inbox view share.
func TestReactionOf(t *testing.T) {
	for _, tc := range []struct {
		typ, raw, kind, emoji, icon string
	}{
		{"Like", `{"type":"Like"}`, ReactionLike, "", ""},
		{"Like", `{"type":"Like","_misskey_reaction":"👍","content":"👍"}`, ReactionEmoji, "👍", ""},
		{"Like", `{"type":"Like","content":"⭐"}`, ReactionEmoji, "⭐", ""},
		{"Announce", `{"type":"Announce"}`, ReactionAnnounce, "", ""},
		{"Dislike", `{"type":"Dislike"}`, ReactionDislike, "", ""},
		{"EmojiReact", `{"type":"EmojiReact","content":"🔥"}`, ReactionEmoji, "🔥", ""},
		{"EmojiReaction", `{"type":"EmojiReaction","content":"🔥"}`, ReactionEmoji, "🔥", ""},
		{"EmojiReact", `{"type":"EmojiReact"}`, ReactionEmoji, "", ""},
		{"EmojiReact", `{"type":"EmojiReact","content":":blob:","tag":[{"type":"Emoji","name":":blob:","icon":{"type":"Image","url":"https://x.example/blob.png"}}]}`,
			ReactionEmoji, ":blob:", "https://x.example/blob.png"},
		{"Like", `{"type":"Like","_misskey_reaction":":blob@x.example:","tag":{"type":"Emoji","name":":blob:","icon":{"url":"https://x.example/b.png"}}}`,
			ReactionEmoji, ":blob@x.example:", "https://x.example/b.png"},
		{"Create", `{"type":"Create","content":"🔥"}`, "", "", ""},
		{"Follow", `{}`, "", "", ""},
	} {
		got := ReactionOf(tc.typ, []byte(tc.raw))
		if got.Kind != tc.kind || got.Emoji != tc.emoji || got.Icon != tc.icon {
			t.Errorf("ReactionOf(%s, %s) = %+v, want %s %q %q", tc.typ, tc.raw, got, tc.kind, tc.emoji, tc.icon)
		}
	}
}
