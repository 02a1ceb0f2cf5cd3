package inbox

import (
	"errors"
	"fmt"
	"testing"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// TestDerefRefusal: a fetch failure that a retry cannot change is a typed
// outcome, a refusal or no match, recorded with the text operators read;
// one that may change is none.
func TestDerefRefusal(t *testing.T) {
	t.Parallel()
	malformed := fmt.Errorf("fetch https://x.example/1: %w", activitypub.ErrMalformed)
	for _, c := range []struct {
		name    string
		err     error
		final   bool
		refused bool
		text    string
	}{
		{"gone", activitypub.ErrGone, true, false, OutcomeNoMatch},
		{"not found", activitypub.ErrNotFound, true, false, OutcomeNoMatch},
		{"403", &activitypub.StatusError{Status: 403}, true, true, "refused: fetch answered 403"},
		{"429", &activitypub.StatusError{Status: 429}, false, false, ""},
		{"408", &activitypub.StatusError{Status: 408}, false, false, ""},
		{"503", &activitypub.StatusError{Status: 503}, false, false, ""},
		{"malformed", malformed, true, true, "refused: " + malformed.Error()},
		{"network", errors.New("connection reset"), false, false, ""},
	} {
		o, final := derefRefusal(c.err)
		if final != c.final || o.Refused() != c.refused || o.String() != c.text {
			t.Errorf("%s: derefRefusal = %q (refused %v), final %v; want %q (refused %v), final %v",
				c.name, o, o.Refused(), final, c.text, c.refused, c.final)
		}
	}
}

// TestRefusal: a store error becomes a typed outcome (a refusal with the
// store's message, or the notFound outcome), a database failure an error.
func TestRefusal(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		err      error
		notFound importOutcome
		want     importOutcome
		wantErr  bool
	}{
		{"nil", nil, outcomeOf(OutcomeIgnored), outcomeOf(OutcomeIgnored), false},
		{"nil, refused", nil, refused("blocked"), refused("blocked"), false},
		{"not found", store.Errorf(store.ENOTFOUND, "no actor"), outcomeOf(OutcomeNoMatch), outcomeOf(OutcomeNoMatch), false},
		{"not found, none given", store.Errorf(store.ENOTFOUND, "no actor"), importOutcome{}, refused("no actor"), false},
		{"invalid", store.Errorf(store.EINVALID, "too long"), outcomeOf(OutcomeIgnored), refused("too long"), false},
		{"database", errors.New("disk I/O error"), outcomeOf(OutcomeIgnored), importOutcome{}, true},
	} {
		got, err := refusal(c.err, c.notFound)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: refusal = %q, %v; want %q, error %v", c.name, got, err, c.want, c.wantErr)
		}
	}
	if o := refused("blocked"); !o.Refused() || o.String() != "refused: blocked" {
		t.Errorf("refused(blocked) = %q, refused %v", o, o.Refused())
	}
	if o := outcomeOf(OutcomeStored); o.Refused() || o.String() != OutcomeStored {
		t.Errorf("outcomeOf(stored) = %q, refused %v", o, o.Refused())
	}
}
