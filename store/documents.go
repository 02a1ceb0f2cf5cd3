package store

import (
	"crypto/ed25519"
	"encoding/json"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// timeFormat is how courier writes times in documents: RFC 3339 in UTC with
// whole seconds, the form Mastodon writes and every peer parses.
const timeFormat = "2006-01-02T15:04:05Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// actorContext returns the JSON-LD @context of courier's actor documents:
// ActivityStreams, security v1 (publicKey), and the extension term
// Mastodon reads.
func actorContext() []any {
	return []any{
		activitypub.ActivityStreams,
		activitypub.SecurityContext,
		activitypub.MultikeyContext,
		map[string]any{
			"manuallyApprovesFollowers": "as:manuallyApprovesFollowers",
			"toot":                      "http://joinmastodon.org/ns#",
			"featured":                  map[string]string{"@id": "toot:featured", "@type": "@id"},
			"discoverable":              "toot:discoverable",
			"indexable":                 "toot:indexable",
			"alsoKnownAs":               map[string]string{"@id": "as:alsoKnownAs", "@type": "@id"},
			// FEP-521a: no context above defines it (security v1 does
			// not; the DID and CID contexts do), and a JSON-LD reader
			// such as Fedify drops an undefined term, and with it the
			// Ed25519 key that proofs and RFC 9421 signatures name.
			"assertionMethod": map[string]string{"@id": "https://w3id.org/security#assertionMethod", "@type": "@id"},
			"schema":          "http://schema.org#",
			"PropertyValue":   "schema:PropertyValue",
			"value":           "schema:value",
		},
	}
}

// TombstoneDocument is what a deleted object is served and federated as.
type TombstoneDocument struct {
	Context    any    `json:"@context,omitempty"`
	ID         string `json:"id"`
	Type       string `json:"type"`
	FormerType string `json:"formerType,omitempty"`
	Deleted    string `json:"deleted,omitempty"`
}

// ObjectID implements the interface objectRef looks for.
func (t *TombstoneDocument) ObjectID() string { return t.ID }

// Tombstone returns the Tombstone document of a deleted object.
func Tombstone(o *Object) *TombstoneDocument {
	ft := o.FormerType
	if ft == "" {
		ft = "Note"
	}
	return &TombstoneDocument{ID: o.URI, Type: "Tombstone", FormerType: ft, Deleted: formatTime(o.DeletedAt)}
}

// ActorTombstone returns the Tombstone document of the local actor name,
// deleted at deleted.
func (s *Store) ActorTombstone(name string, deleted time.Time) *TombstoneDocument {
	return &TombstoneDocument{ID: s.uris.Actor(name), Type: "Tombstone", FormerType: "Person", Deleted: formatTime(deleted)}
}

// PublicKeyDocument is the publicKey of an actor document.
type PublicKeyDocument struct {
	ID           string `json:"id"`
	Owner        string `json:"owner"`
	PublicKeyPem string `json:"publicKeyPem"`
}

// EndpointsDocument is the endpoints of an actor document.
type EndpointsDocument struct {
	SharedInbox string `json:"sharedInbox"`
}

// ActorDocument is a local actor as courier serves it at /users/{name}:
// the fields Mastodon, GoToSocial and their peers read.
type ActorDocument struct {
	Context                   any               `json:"@context,omitempty"`
	ID                        string            `json:"id"`
	Type                      string            `json:"type"`
	PreferredUsername         string            `json:"preferredUsername"`
	Name                      string            `json:"name"`
	Summary                   string            `json:"summary"`
	URL                       string            `json:"url"`
	Inbox                     string            `json:"inbox"`
	Outbox                    string            `json:"outbox"`
	Followers                 string            `json:"followers"`
	Following                 string            `json:"following"`
	Featured                  string            `json:"featured"`
	Endpoints                 EndpointsDocument `json:"endpoints"`
	ManuallyApprovesFollowers bool              `json:"manuallyApprovesFollowers"`
	Published                 string            `json:"published"`
	PublicKey                 PublicKeyDocument `json:"publicKey"`
	// AssertionMethod publishes the actor's Ed25519 key (FEP-521a).
	AssertionMethod []activitypub.Multikey `json:"assertionMethod,omitempty"`
	// The profile beyond name and summary (profile.go); absent when unset.
	Icon         *ImageDocument          `json:"icon,omitempty"`
	Image        *ImageDocument          `json:"image,omitempty"`
	Attachment   []PropertyValueDocument `json:"attachment,omitempty"`
	Discoverable *bool                   `json:"discoverable,omitempty"`
	Indexable    *bool                   `json:"indexable,omitempty"`
	AlsoKnownAs  []string                `json:"alsoKnownAs,omitempty"`
	// MovedTo is the account the actor moved to (MoveActor), if any.
	MovedTo string `json:"movedTo,omitempty"`
}

// ObjectID implements the interface objectRef looks for.
func (d *ActorDocument) ObjectID() string { return d.ID }

// ActorDocument returns a's actor document, with @context.
func (s *Store) ActorDocument(a *Actor) *ActorDocument {
	u := s.uris
	name := a.DisplayName
	if name == "" {
		name = a.Name
	}
	d := &ActorDocument{
		Context:                   actorContext(),
		ID:                        u.Actor(a.Name),
		Type:                      "Person",
		PreferredUsername:         a.Name,
		Name:                      name,
		Summary:                   a.Summary,
		URL:                       u.Actor(a.Name),
		Inbox:                     u.Inbox(a.Name),
		Outbox:                    u.Outbox(a.Name),
		Followers:                 u.Followers(a.Name),
		Following:                 u.Following(a.Name),
		Featured:                  u.Featured(a.Name),
		Endpoints:                 EndpointsDocument{SharedInbox: u.SharedInbox()},
		ManuallyApprovesFollowers: a.ManuallyApprovesFollowers,
		Published:                 formatTime(a.CreatedAt),
		PublicKey: PublicKeyDocument{
			ID:           u.KeyID(a.Name),
			Owner:        u.Actor(a.Name),
			PublicKeyPem: a.PublicKeyPEM,
		},
		AssertionMethod: assertionMethod(u, a),
	}
	d.setProfile(a.Profile)
	return d
}

// assertionMethod returns the Multikey entries of a's actor document.
func assertionMethod(u URIs, a *Actor) []activitypub.Multikey {
	if a.Ed25519Key == nil {
		return nil
	}
	return []activitypub.Multikey{activitypub.NewEd25519Multikey(u.Ed25519KeyID(a.Name), u.Actor(a.Name),
		a.Ed25519Key.Public().(ed25519.PublicKey))}
}

// ActorJSON returns a's actor document as JSON.
func (s *Store) ActorJSON(a *Actor) ([]byte, error) {
	b, err := json.Marshal(s.ActorDocument(a))
	if err != nil {
		return nil, wrap("actor document", err)
	}
	return b, nil
}
