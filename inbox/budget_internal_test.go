package inbox

import "testing"

// TestKeyHostSpellings: one server named in several spellings has one
// budget (keyHost), so spelling its port or address differently in each
// key id buys no fresh budget.
func TestKeyHostSpellings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ keyID, want string }{
		{"https://Social.Example/users/a#main-key", "social.example"},
		{"https://social.example./users/a#main-key", "social.example"},
		{"https://social.example:443/users/a#main-key", "social.example"},
		{"https://social.example:0443/users/a#main-key", "social.example"},
		{"https://social.example:00443/users/a#main-key", "social.example"},
		{"http://social.example:80/users/a#main-key", "social.example"},
		{"http://social.example:443/users/a#main-key", "social.example:443"},
		{"https://social.example:8443/users/a", "social.example:8443"},
		{"https://social.example:08443/users/a", "social.example:8443"},
		{"https://social.example:008443/users/a", "social.example:8443"},
		{"http://127.0.0.1:8080/users/a", "127.0.0.1:8080"},
		{"http://127.0.0.1:08080/users/a", "127.0.0.1:8080"},
		{"http://[::1]:8080/users/a", "[::1]:8080"},
		{"http://[0:0:0:0:0:0:0:1]:8080/users/a", "[::1]:8080"},
		{"http://[::0:1]:8080/users/a", "[::1]:8080"},
		{"http://[0000::0001]:0008080/users/a", "[::1]:8080"},
		{"http://[::ffff:127.0.0.2]:8080/users/a", "127.0.0.2:8080"},
		{"https://[::ffff:7f00:2]/users/a", "127.0.0.2"},
		{"https://[2001:DB8:0:0::1]/users/a", "[2001:db8::1]"},
		{"https://[2001:db8::1]:443/users/a", "[2001:db8::1]"},
		{"not a url\x7f", ""},
		{"/relative", ""},
	} {
		if got := keyHost(c.keyID); got != c.want {
			t.Errorf("keyHost(%q) = %q, want %q", c.keyID, got, c.want)
		}
	}
}
