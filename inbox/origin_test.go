package inbox

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

func TestCheckOrigin(t *testing.T) {
	t.Parallel()
	const actor = "https://a.example/users/bob"
	for _, tc := range []struct {
		name string
		doc  string
		want error
	}{
		{"like of anything", `{"id":"https://a.example/l/1","type":"Like","actor":"` + actor + `","object":"https://b.example/n/1"}`, nil},
		{"activity id elsewhere", `{"id":"https://b.example/l/1","type":"Like","actor":"` + actor + `","object":"https://b.example/n/1"}`, ErrOrigin},
		{"activity id on another port", `{"id":"https://a.example:8443/l/1","type":"Like","actor":"` + actor + `","object":"x"}`, ErrOrigin},
		{"activity id over another scheme", `{"id":"http://a.example/l/1","type":"Like","actor":"` + actor + `","object":"x"}`, ErrOrigin},
		{"host case", `{"id":"https://A.EXAMPLE/l/1","type":"Like","actor":"` + actor + `","object":"x"}`, nil},
		{"create own note", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":{"id":"https://a.example/n/1","type":"Note","attributedTo":"` + actor + `"}}`, nil},
		{"create with attributedTo list", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":{"id":"https://a.example/n/1","type":"Note","attributedTo":[{"id":"` + actor + `"}]}}`, nil},
		{"create note elsewhere", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":{"id":"https://b.example/n/1","type":"Note","attributedTo":"` + actor + `"}}`, ErrOrigin},
		{"create note of another", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":{"id":"https://a.example/n/1","type":"Note","attributedTo":"https://a.example/users/eve"}}`, ErrOrigin},
		{"create note without id", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":{"type":"Note","attributedTo":"` + actor + `"}}`, ErrOrigin},
		{"create by reference", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":"https://a.example/n/1"}`, nil},
		{"create by reference elsewhere", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `","object":"https://b.example/n/1"}`, ErrOrigin},
		{"create without object", `{"id":"https://a.example/c/1","type":"Create","actor":"` + actor + `"}`, activitypub.ErrMalformed},
		{"update self", `{"id":"https://a.example/u/1","type":"Update","actor":"` + actor + `","object":{"id":"` + actor + `","type":"Person"}}`, nil},
		{"update other actor", `{"id":"https://a.example/u/1","type":"Update","actor":"` + actor + `","object":{"id":"https://a.example/users/eve","type":"Person"}}`, ErrOrigin},
		{"delete own", `{"id":"https://a.example/d/1","type":"Delete","actor":"` + actor + `","object":{"id":"https://a.example/n/1","type":"Tombstone"}}`, nil},
		{"delete self", `{"id":"https://a.example/d/1","type":"Delete","actor":"` + actor + `","object":"` + actor + `"}`, nil},
		{"delete elsewhere", `{"id":"https://a.example/d/1","type":"Delete","actor":"` + actor + `","object":"https://b.example/n/1"}`, ErrOrigin},
		{"delete nothing", `{"id":"https://a.example/d/1","type":"Delete","actor":"` + actor + `"}`, activitypub.ErrMalformed},
		{"undo own", `{"id":"https://a.example/x/1","type":"Undo","actor":"` + actor + `","object":{"id":"https://a.example/f/1","type":"Follow","actor":"` + actor + `","object":"https://b.example/u/a"}}`, nil},
		{"undo of another's", `{"id":"https://a.example/x/1","type":"Undo","actor":"` + actor + `","object":{"id":"https://a.example/f/1","type":"Follow","actor":"https://a.example/users/eve"}}`, ErrOrigin},
		{"undo by id elsewhere", `{"id":"https://a.example/x/1","type":"Undo","actor":"` + actor + `","object":"https://b.example/f/1"}`, ErrOrigin},
	} {
		a, err := activitypub.ParseActivity([]byte(tc.doc))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := checkOrigin(new(urls), a); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, err := range []error{
		ErrContentType, ErrTooLarge, ErrUnknownInbox, &activitypub.MissingFieldError{Field: "id"}, activitypub.ErrMalformed,
		ErrBadURL, activitypub.ErrNoSignature, activitypub.ErrRFC9421, activitypub.ErrMalformedSignature,
		&activitypub.MissingSignedHeaderError{Header: "digest"}, activitypub.ErrDigestMismatch,
		activitypub.ErrDateOutOfWindow, activitypub.ErrUnsupportedKey, activitypub.ErrBadSignature, ErrUnknownKey,
		ErrActorMismatch, ErrDomainBlocked, ErrActorBlocked, ErrOrigin, errors.New("disk full"),
	} {
		status, result := classify(err)
		if seen[result] {
			t.Errorf("%v: result %q used twice", err, result)
		}
		seen[result] = true
		if status == http.StatusAccepted || status < 400 {
			t.Errorf("%v: status %d", err, status)
		}
	}
	for _, r := range Results() {
		delete(seen, r)
	}
	if len(seen) != 0 {
		t.Errorf("results missing from Results(): %v", seen)
	}
	// Every failed signature check is 401, never 202 or 403.
	for _, err := range []error{activitypub.ErrNoSignature, activitypub.ErrRFC9421, activitypub.ErrBadSignature,
		activitypub.ErrDigestMismatch, activitypub.ErrDateOutOfWindow, ErrUnknownKey} {
		if status, _ := classify(err); status != http.StatusUnauthorized {
			t.Errorf("%v: %d, want 401", err, status)
		}
	}
}

// The url.Parse readings the urls helpers must agree with.
func refOrigin(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", false
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), true
}

func refHostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

func refAuthority(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

var urlCases = []string{
	"https://a.example/users/bob", "http://127.0.0.1:8080/inbox", "https://A.Example:443/x?y=1#z",
	"https://a.example", "https://a.example?x", "https://a.example#f", "https://a.example?", "https://a.example/a@b",
	"https://a.example:", "https://a.example:x/", "https://a.example:1:2/", "https://user@a.example/", "https://user:pw@a.example/",
	"https://[::1]:80/", "https://a_b.example/", "https://a.example/%41", "https://a.example/%zz", "https://a.example/ b",
	"https://a.example/\x7f", "https://a.example/é", "https:///x", "https://", "http:/a", "HTTPS://a.example/",
	"ftp://a.example/", "//a.example/", "a.example", "", "https://a.example/p?q=%&r#%", "https://a%2e.example/",
	"https://a.example/\t", "https://a..example/", "https://-/", "https://a.example/'()*+,;=!$&~",
}

func TestURLHelpersMatchURLParse(t *testing.T) {
	t.Parallel()
	for _, raw := range urlCases {
		checkURLHelpers(t, raw)
	}
}

func FuzzURLHelpersMatchURLParse(f *testing.F) {
	for _, raw := range urlCases {
		f.Add(raw)
	}
	f.Fuzz(checkURLHelpers)
}

func checkURLHelpers(t *testing.T, raw string) {
	var c urls
	for range 2 { // parsed, then remembered
		o, ok := c.origin(raw)
		var got string
		if ok {
			got = o.scheme + "://" + o.host
		}
		if ro, rok := refOrigin(raw); got != ro || ok != rok {
			t.Fatalf("origin(%q) = %q, %v; url.Parse gives %q, %v", raw, got, ok, ro, rok)
		}
		if got, want := c.hostOf(raw), refHostOf(raw); got != want {
			t.Fatalf("hostOf(%q) = %q; url.Parse gives %q", raw, got, want)
		}
		if got, want := c.authority(raw), refAuthority(raw); got != want {
			t.Fatalf("authority(%q) = %q; url.Parse gives %q", raw, got, want)
		}
	}
}

// TestURLsBeyondMemory checks that URLs past the remembered few are still
// read right.
func TestURLsBeyondMemory(t *testing.T) {
	t.Parallel()
	var c urls
	for i := range 2 * maxURLs {
		raw := fmt.Sprintf("https://h%d.example/x", i)
		if got, want := c.authority(raw), fmt.Sprintf("h%d.example", i); got != want {
			t.Fatalf("authority(%q) = %q, want %q", raw, got, want)
		}
	}
}
