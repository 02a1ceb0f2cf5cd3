package inbox

import (
	"errors"
	"net/http"
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
		if err := checkOrigin(a); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
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
