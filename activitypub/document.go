package activitypub

import (
	"encoding/json"
	"fmt"
	"time"
)

// actorDoc is the wire form of a local actor document.
type actorDoc struct {
	Context                   []any          `json:"@context"`
	ID                        string         `json:"id"`
	Type                      string         `json:"type"`
	PreferredUsername         string         `json:"preferredUsername"`
	Name                      string         `json:"name,omitempty"`
	Summary                   string         `json:"summary,omitempty"`
	URL                       string         `json:"url,omitempty"`
	Inbox                     string         `json:"inbox"`
	Outbox                    string         `json:"outbox,omitempty"`
	Followers                 string         `json:"followers,omitempty"`
	Following                 string         `json:"following,omitempty"`
	ManuallyApprovesFollowers bool           `json:"manuallyApprovesFollowers"`
	Endpoints                 map[string]any `json:"endpoints,omitempty"`
	PublicKey                 *PublicKey     `json:"publicKey,omitempty"`
}

// MarshalActorDocument renders a local actor as the document peers fetch:
// @context with ActivityStreams and the security vocabulary (plus the
// manuallyApprovesFollowers term), endpoints.sharedInbox, and publicKey
// {id, owner, publicKeyPem}. Serve it with ContentType. a.PublicKeys and
// a.Raw are ignored.
func MarshalActorDocument(a *Actor) ([]byte, error) {
	if a == nil || a.ID == "" || a.Inbox == "" {
		return nil, fmt.Errorf("%w: actor document needs id and inbox", ErrBuild)
	}
	typ := a.Type
	if typ == "" {
		typ = "Person"
	}
	doc := actorDoc{
		Context: []any{ActivityStreams, SecurityContext,
			map[string]string{"manuallyApprovesFollowers": "as:manuallyApprovesFollowers"}},
		ID:                        a.ID,
		Type:                      typ,
		PreferredUsername:         a.PreferredUsername,
		Name:                      a.Name,
		Summary:                   a.Summary,
		URL:                       a.URL,
		Inbox:                     a.Inbox,
		Outbox:                    a.Outbox,
		Followers:                 a.Followers,
		Following:                 a.Following,
		ManuallyApprovesFollowers: a.ManuallyApprovesFollowers,
	}
	if a.SharedInbox != "" {
		doc.Endpoints = map[string]any{"sharedInbox": a.SharedInbox}
	}
	if a.PublicKey.PublicKeyPem != "" {
		k := a.PublicKey
		if k.Owner == "" {
			k.Owner = a.ID
		}
		if k.ID == "" {
			k.ID = KeyID(a.ID)
		}
		doc.PublicKey = &k
	}
	return marshalCanonical(doc)
}

// MarshalTombstone renders the Tombstone served (with 410 Gone) in place of
// a deleted object.
func MarshalTombstone(id, formerType string, deleted time.Time) ([]byte, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: tombstone needs an id", ErrBuild)
	}
	doc := struct {
		Context    string `json:"@context"`
		ID         string `json:"id"`
		Type       string `json:"type"`
		FormerType string `json:"formerType,omitempty"`
		Deleted    string `json:"deleted,omitempty"`
	}{Context: ActivityStreams, ID: id, Type: "Tombstone", FormerType: formerType}
	if !deleted.IsZero() {
		doc.Deleted = deleted.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	return marshalCanonical(doc)
}

// marshalCanonical encodes v as encoding/json does by default (HTML
// characters escaped, no trailing newline), so the bytes stay identical when
// embedded as a json.RawMessage in an event payload marshalled by
// json.Marshal (which escapes and compacts raw messages).
func marshalCanonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	return b, nil
}
