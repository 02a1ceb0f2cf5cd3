package server

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/courier-ap/courier/activitypub"
)

// TestOutboxEventStream: with OutboxStream, an actor's outbox collection
// names its eventStream (served by package app) and the context that
// defines the term, to anyone who may read the collection; without it,
// no eventStream.
func TestOutboxEventStream(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		b := setupBase(t, "", Config{OutboxStream: on})
		for _, tok := range []string{"", b.token} {
			var headers []string
			if tok != "" {
				headers = []string{"Authorization", "Bearer " + tok}
			}
			r := b.get(t, "/users/alice/outbox", headers...)
			if r.StatusCode != http.StatusOK {
				t.Fatalf("GET the outbox: %d %s", r.StatusCode, r.Body)
			}
			doc := r.json(t)
			want := ""
			if on {
				want = b.base + "/users/alice/outbox/stream"
			}
			if got, _ := doc["eventStream"].(string); got != want {
				t.Errorf("OutboxStream %v, token %v: eventStream %q, want %q", on, tok != "", got, want)
			}
			ctx, _ := doc["@context"].([]any)
			defines := len(ctx) == 2 && ctx[0] == activitypub.ActivityStreams &&
				fmt.Sprint(ctx[1]) == fmt.Sprint(activitypub.EventStreamTerm)
			if on != defines {
				t.Errorf("OutboxStream %v: @context %v", on, doc["@context"])
			}
			if doc["type"] != "OrderedCollection" || doc["first"] != b.base+"/users/alice/outbox?page=true" {
				t.Errorf("the outbox collection: %s", r.Body)
			}
		}
	}
}
