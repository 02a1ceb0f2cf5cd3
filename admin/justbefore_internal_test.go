package admin

import (
	"testing"
	"unicode/utf8"
)

// justBefore is valid UTF-8 (PostgreSQL refuses anything else as text),
// sorts before its string, and leaves no inbox-like string between them.
func TestJustBefore(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"https://h.example/users/bob/inbox",
		"https://h.example/inbox",
		"https://h.example/users/zoë",
		"https://h.example/users/a\u00a0",
	} {
		b := justBefore(s)
		if !utf8.ValidString(b) || b >= s {
			t.Errorf("justBefore(%q) = %q: want valid UTF-8 before it", s, b)
		}
		// The strings closest below s: its last code point decreased,
		// followed by anything a URL may hold.
		r, n := utf8.DecodeLastRuneInString(s)
		for _, tail := range []string{"", "~", "/x", "\u00ff", "\uffff", "\U0010fffe/x"} {
			c := s[:len(s)-n] + string(r-1) + tail
			if c > b {
				t.Errorf("%q lies between justBefore(%q) = %q and it", c, s, b)
			}
		}
	}
	if justBefore("") != "" {
		t.Error(`justBefore("") is not ""`)
	}
}
