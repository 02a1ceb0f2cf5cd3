package server

import (
	"github.com/courier-ap/courier/store"
)

// The emoji reactions of a local object are served in its document as
// "reactions", courier's own property beside likes and shares: a
// Collection whose totalItems is the number of emoji reactions and whose
// items are one entry per emoji, in the shape of the EmojiReact that
// brought it ("content" the emoji, a custom emoji's image in "tag" as an
// Emoji with an icon) with its count in totalItems, the most frequent
// first. An object without emoji reactions has no "reactions".

// emojiSummary is one emoji's entry in reactions.
type emojiSummary struct {
	Type       string      `json:"type"`
	Content    string      `json:"content"`
	Tag        []emojiIcon `json:"tag,omitempty"`
	TotalItems int         `json:"totalItems"`
}

type emojiIcon struct {
	Type string    `json:"type"`
	Name string    `json:"name"`
	Icon emojiLink `json:"icon"`
}

type emojiLink struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

type reactionsDocument struct {
	Type       string         `json:"type"`
	TotalItems int            `json:"totalItems"`
	Items      []emojiSummary `json:"items"`
}

// reactionsSummary returns the "reactions" of an object with the emoji
// counts cs; nil when there are none.
func reactionsSummary(cs []store.EmojiCount) *reactionsDocument {
	if len(cs) == 0 {
		return nil
	}
	d := &reactionsDocument{Type: "Collection", Items: make([]emojiSummary, 0, len(cs))}
	for _, c := range cs {
		e := emojiSummary{Type: "EmojiReact", Content: c.Emoji, TotalItems: c.Count}
		if c.Icon != "" {
			e.Tag = []emojiIcon{{Type: "Emoji", Name: c.Emoji, Icon: emojiLink{Type: "Image", URL: c.Icon}}}
		}
		d.TotalItems += c.Count
		d.Items = append(d.Items, e)
	}
	return d
}

// emojiLine is the emoji counts as the HTML page shows them.
type emojiLine struct {
	Emoji string
	Count int
}

func emojiLines(cs []store.EmojiCount) []emojiLine {
	out := make([]emojiLine, 0, len(cs))
	for _, c := range cs {
		out = append(out, emojiLine{Emoji: c.Emoji, Count: c.Count})
	}
	return out
}
