package store

import (
	"net/url"
	"strings"

	"github.com/courier-ap/courier/activitypub"
)

// Public is the ActivityStreams public collection.
const Public = activitypub.Public

// URIs builds and parses the URLs of courier's own documents. Base is the
// public origin without a trailing slash, e.g. "https://courier.example".
type URIs struct {
	Base string
}

// NewURIs returns the URIs of baseURL, trimming any trailing slash.
func NewURIs(baseURL string) URIs {
	return URIs{Base: strings.TrimRight(baseURL, "/")}
}

// Actor is the id of the local actor name: {base}/users/{name}.
func (u URIs) Actor(name string) string { return u.Base + "/users/" + name }

// Inbox is the actor's personal inbox.
func (u URIs) Inbox(name string) string { return u.Actor(name) + "/inbox" }

// Outbox is the actor's outbox.
func (u URIs) Outbox(name string) string { return u.Actor(name) + "/outbox" }

// Followers is the actor's followers collection.
func (u URIs) Followers(name string) string { return u.Actor(name) + "/followers" }

// Following is the actor's following collection.
func (u URIs) Following(name string) string { return u.Actor(name) + "/following" }

// KeyID is the id of the actor's public key: {actor}#main-key.
func (u URIs) KeyID(name string) string { return u.Actor(name) + "#main-key" }

// Ed25519KeyID is the id of name's Ed25519 key, {actor}#ed25519-key.
func (u URIs) Ed25519KeyID(name string) string { return activitypub.Ed25519KeyID(u.Actor(name)) }

// SharedInbox is the instance's shared inbox: {base}/inbox.
func (u URIs) SharedInbox() string { return u.Base + "/inbox" }

// Object is the id of the local object with local id id: {base}/objects/{id}.
func (u URIs) Object(id string) string { return u.Base + "/objects/" + id }

// Likes is the likes collection of the local object id.
func (u URIs) Likes(id string) string { return u.Object(id) + "/likes" }

// Shares is the shares collection of the local object id.
func (u URIs) Shares(id string) string { return u.Object(id) + "/shares" }

// Quote is the id of the local quote authorization (FEP-044f stamp) with
// local id id: {base}/quotes/{id}.
func (u URIs) Quote(id string) string { return u.Base + "/quotes/" + id }

// QuoteID returns the local id of the quote authorization uri.
func (u URIs) QuoteID(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, u.Base+"/quotes/")
	if !ok || rest == "" || strings.ContainsAny(rest, "/?#") {
		return "", false
	}
	return rest, true
}

// Featured is actor name's featured (pinned) collection.
func (u URIs) Featured(name string) string { return u.Actor(name) + "/featured" }

// Activity is the URL of the local activity with local id id:
// {base}/activities/{id}.
func (u URIs) Activity(id string) string { return u.Base + "/activities/" + id }

// Host is the host (with port, if any) of Base.
func (u URIs) Host() string {
	p, err := url.Parse(u.Base)
	if err != nil {
		return ""
	}
	return p.Host
}

// IsLocal reports whether uri is under Base.
func (u URIs) IsLocal(uri string) bool {
	return uri == u.Base || strings.HasPrefix(uri, u.Base+"/") || strings.HasPrefix(uri, u.Base+"#")
}

// ActorName returns the name of the local actor whose id is uri.
func (u URIs) ActorName(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, u.Base+"/users/")
	if !ok || rest == "" || strings.ContainsAny(rest, "/?#") {
		return "", false
	}
	return rest, true
}

// hostOf returns the lower-cased host (without port) of an absolute URL.
func hostOf(raw string) string {
	p, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(p.Hostname())
}
