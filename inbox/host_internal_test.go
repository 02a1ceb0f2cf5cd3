package inbox

import "testing"

func TestNormalAuthority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, scheme, want string }{
		{"social.example", "https", "social.example:443"},
		{"Social.Example:443", "https", "social.example:443"},
		{"social.example.", "https", "social.example:443"},
		{"social.example", "http", "social.example:80"},
		{"social.example:8443", "https", "social.example:8443"},
		{"[::1]:8080", "http", "[::1]:8080"},
		{"[::1]", "http", "[::1]:80"},
		{"localhost", "https", "localhost:443"},
	} {
		if got := normalAuthority(c.in, c.scheme); got != c.want {
			t.Errorf("normalAuthority(%q, %s) = %q, want %q", c.in, c.scheme, got, c.want)
		}
	}
}
