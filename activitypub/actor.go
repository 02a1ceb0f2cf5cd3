package activitypub

import (
	"bytes"
	"crypto"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Actor is a remote (or local) actor document, decoded tolerantly from the
// shapes Mastodon, GoToSocial, Misskey, Pleroma, Lemmy and others publish.
// Its own JSON form (the struct tags) is a flat internal record for
// storage, not an actor document: peers are served MarshalActorDocument.
type Actor struct {
	// ID is the actor's id.
	ID string `json:"id"`
	// Type is Person, Service, Group, Application or Organization.
	Type string `json:"type"`
	// PreferredUsername is the handle's user part.
	PreferredUsername string `json:"preferredUsername,omitempty"`
	// Name is the display name.
	Name string `json:"name,omitempty"`
	// Summary is the profile text (HTML).
	Summary string `json:"summary,omitempty"`
	// URL is the profile page.
	URL string `json:"url,omitempty"`
	// Inbox, Outbox, Followers and Following are the actor's collections.
	Inbox     string `json:"inbox"`
	Outbox    string `json:"outbox,omitempty"`
	Followers string `json:"followers,omitempty"`
	Following string `json:"following,omitempty"`
	// SharedInbox comes from endpoints.sharedInbox; empty when none.
	SharedInbox string `json:"sharedInbox,omitempty"`
	// ManuallyApprovesFollowers is the locked-account flag.
	ManuallyApprovesFollowers bool `json:"manuallyApprovesFollowers,omitempty"`
	// PublicKey is the actor's first key (the one whose id is usually the
	// keyId of its signatures); zero when the actor publishes none.
	PublicKey PublicKey `json:"publicKey"`
	// PublicKeys lists every key the document carries (publicKey given as a
	// list, plus Misskey's additionalPublicKeys and FEP-521a assertionMethod
	// Multikeys).
	PublicKeys []PublicKey `json:"publicKeys,omitempty"`
	// Raw is the document as received (nil for actors not parsed from JSON).
	Raw json.RawMessage `json:"-"`
}

// PublicKey is a publicKey entry of an actor, a standalone key document, or
// a FEP-521a Multikey (from assertionMethod, or served alone).
type PublicKey struct {
	// ID is the key id, the keyId of signatures made with it.
	ID string `json:"id"`
	// Owner is the id of the actor owning the key (a Multikey's controller).
	Owner string `json:"owner"`
	// PublicKeyPem is the PEM-encoded public key (SPKI, sometimes PKCS#1);
	// empty for a Multikey.
	PublicKeyPem string `json:"publicKeyPem"`
	// PublicKeyMultibase is a Multikey's key (see ParseMultikey); empty for
	// a PEM key.
	PublicKeyMultibase string `json:"publicKeyMultibase,omitempty"`
}

// Parse returns the key material, from the PEM or the Multikey. Errors
// match ErrBadKey.
func (k PublicKey) Parse() (crypto.PublicKey, error) {
	if k.PublicKeyPem == "" && k.PublicKeyMultibase != "" {
		return ParseMultikey(k.PublicKeyMultibase)
	}
	return ParsePublicKeyPEM(k.PublicKeyPem)
}

// InboxFor returns the shared inbox when the actor has one, else its inbox.
func (a *Actor) InboxFor() string {
	if a.SharedInbox != "" {
		return a.SharedInbox
	}
	return a.Inbox
}

// Key returns the actor's key with the given id.
func (a *Actor) Key(keyID string) (PublicKey, bool) {
	if a.PublicKey.ID == keyID && keyID != "" {
		return a.PublicKey, true
	}
	for _, k := range a.PublicKeys {
		if k.ID == keyID && keyID != "" {
			return k, true
		}
	}
	return PublicKey{}, false
}

// actorWire holds the raw properties of an actor document that ParseActor
// reads.
type actorWire struct {
	ID                        json.RawMessage `json:"id"`
	Type                      json.RawMessage `json:"type"`
	PreferredUsername         json.RawMessage `json:"preferredUsername"`
	Name                      json.RawMessage `json:"name"`
	Summary                   json.RawMessage `json:"summary"`
	URL                       json.RawMessage `json:"url"`
	Inbox                     json.RawMessage `json:"inbox"`
	Outbox                    json.RawMessage `json:"outbox"`
	Followers                 json.RawMessage `json:"followers"`
	Following                 json.RawMessage `json:"following"`
	Endpoints                 json.RawMessage `json:"endpoints"`
	ManuallyApprovesFollowers json.RawMessage `json:"manuallyApprovesFollowers"`
	PublicKey                 json.RawMessage `json:"publicKey"`
	AdditionalPublicKeys      json.RawMessage `json:"additionalPublicKeys"`
	AssertionMethod           json.RawMessage `json:"assertionMethod"`
}

// ActorTypes are the ActivityStreams actor types.
var ActorTypes = []string{"Person", "Service", "Application", "Group", "Organization"}

// IsActorType reports whether t names an ActivityStreams actor type, in
// its compact form (Person), prefixed (as:Person) or as the full IRI.
func IsActorType(t string) bool {
	t = strings.TrimPrefix(t, "as:")
	t = strings.TrimPrefix(t, ActivityStreams+"#")
	t = strings.TrimPrefix(t, "http://www.w3.org/ns/activitystreams#")
	return slices.Contains(ActorTypes, t)
}

// notActorTypes are types no actor has: a document that names one of
// them is not an actor, whatever else it names.
var notActorTypes = append([]string{
	"Object", "Tombstone", "Profile", "Relationship", "Link", "Mention", "Hashtag",
	"Collection", "OrderedCollection", "CollectionPage", "OrderedCollectionPage",
	"Key", "CryptographicKey", "Multikey", "Activity", "Create", "Update",
}, contentTypes...)

// actorType returns the actor type of a type property (a string or a
// list): the first entry that is an actor type, "" when none is or when
// an entry names a type no actor has (a Note that also says Person is a
// Note).
func actorType(raw json.RawMessage) string {
	var l []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		l = []string{one}
	} else if json.Unmarshal(raw, &l) != nil {
		return ""
	}
	found := ""
	for _, t := range l {
		name := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(t, "as:"), ActivityStreams+"#"),
			"https://w3id.org/security#")
		switch {
		case slices.Contains(notActorTypes, name):
			return ""
		case found == "" && IsActorType(t):
			found = t
		}
	}
	return found
}

// ParseActor decodes an actor document. It requires "id", "inbox" (each
// reported as *MissingFieldError) and a type that is an actor type
// (IsActorType; ErrNotActor otherwise): a Note, a key or any other object
// that carries an inbox is not an actor, so no object a server hosts
// becomes an identity. The public key is optional here, and callers that
// verify signatures check for it.
func ParseActor(data []byte) (*Actor, error) {
	var w actorWire
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	a := &Actor{
		ID:                firstString(w.ID),
		Type:              firstString(w.Type),
		PreferredUsername: firstString(w.PreferredUsername),
		Name:              stringOrMap(w.Name),
		Summary:           stringOrMap(w.Summary),
		URL:               firstID(w.URL),
		Inbox:             firstID(w.Inbox),
		Outbox:            firstID(w.Outbox),
		Followers:         firstID(w.Followers),
		Following:         firstID(w.Following),
		Raw:               json.RawMessage(bytes.Clone(data)),
	}
	_ = json.Unmarshal(w.ManuallyApprovesFollowers, &a.ManuallyApprovesFollowers)
	var ep struct {
		SharedInbox json.RawMessage `json:"sharedInbox"`
	}
	if len(w.Endpoints) > 0 && json.Unmarshal(w.Endpoints, &ep) == nil {
		a.SharedInbox = firstID(ep.SharedInbox)
	}
	keys := w.keys(a.ID)
	if len(keys) > 0 {
		a.PublicKey = keys[0]
		a.PublicKeys = keys
	}
	switch {
	case a.ID == "":
		return nil, &MissingFieldError{Field: "id"}
	case a.Inbox == "":
		return nil, &MissingFieldError{Field: "inbox"}
	}
	if t := actorType(w.Type); t != "" {
		a.Type = t
	} else {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotActor, a.ID, typeName(w.Type))
	}
	return a, nil
}

// typeName is a type property for a message: its first string, or
// "document without a type".
func typeName(raw json.RawMessage) string {
	if t := firstString(raw); t != "" {
		return fmt.Sprintf("%q", t)
	}
	return "document without an actor type"
}

// keys lists the keys the document carries, PEM keys first, each with an
// owner (the document's id, id, when the entry names none).
func (w *actorWire) keys(id string) []PublicKey {
	keys := parseKeys(w.PublicKey)
	keys = append(keys, parseKeys(w.AdditionalPublicKeys)...)
	keys = append(keys, parseKeys(w.AssertionMethod)...)
	for i := range keys {
		if keys[i].Owner == "" {
			keys[i].Owner = id
		}
	}
	return keys
}

// keyHolder is what a key id URL may serve: a whole actor, a minimal actor
// (GoToSocial: id, type, preferredUsername, publicKey; no inbox), a
// standalone key document, or a Multikey.
type keyHolder struct {
	id   string
	keys []PublicKey
}

// parseKeyHolder decodes a document served at a key id: its id and every
// key it carries, itself included when it is a key.
func parseKeyHolder(data []byte) (*keyHolder, error) {
	var w actorWire
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	h := &keyHolder{id: firstString(w.ID)}
	if h.id == "" {
		return nil, &MissingFieldError{Field: "id"}
	}
	h.keys = append(parseKeys(data), w.keys(h.id)...)
	if len(h.keys) == 0 {
		return nil, &MissingFieldError{Field: "publicKey"}
	}
	return h, nil
}

// key returns the holder's key with this id.
func (h *keyHolder) key(keyID string) (PublicKey, bool) {
	for _, k := range h.keys {
		if k.ID == keyID && keyID != "" {
			return k, true
		}
	}
	return PublicKey{}, false
}

// ParsePublicKeyDocument decodes a standalone key document (an object with
// id, owner and publicKeyPem), a Multikey (id, controller,
// publicKeyMultibase), or an actor's publicKey entry. It requires an id, an
// owner and the key.
func ParsePublicKeyDocument(data []byte) (*PublicKey, error) {
	keys := parseKeys(data)
	if len(keys) == 0 {
		return nil, &MissingFieldError{Field: "publicKeyPem"}
	}
	k := keys[0]
	switch {
	case k.ID == "":
		return nil, &MissingFieldError{Field: "id"}
	case k.Owner == "":
		return nil, &MissingFieldError{Field: "owner"}
	}
	return &k, nil
}

// parseKeys reads a publicKey, additionalPublicKeys or assertionMethod
// property: one key object or a list of them (entries given only by id are
// skipped: there is no key material to use). A Multikey's controller is its
// owner.
func parseKeys(raw json.RawMessage) []PublicKey {
	var out []PublicKey
	for _, it := range objectItems(raw) {
		var w struct {
			ID                 json.RawMessage `json:"id"`
			Owner              json.RawMessage `json:"owner"`
			Controller         json.RawMessage `json:"controller"`
			PublicKeyPem       json.RawMessage `json:"publicKeyPem"`
			PublicKeyMultibase json.RawMessage `json:"publicKeyMultibase"`
			Type               json.RawMessage `json:"type"`
		}
		it = bytes.TrimSpace(it)
		if len(it) == 0 || it[0] != '{' || json.Unmarshal(it, &w) != nil {
			continue
		}
		k := PublicKey{ID: firstString(w.ID), Owner: firstID(w.Owner), PublicKeyPem: firstString(w.PublicKeyPem)}
		if k.PublicKeyPem == "" {
			// A multibase key is a FEP-521a Multikey; other verification
			// methods (JsonWebKey...) are not read.
			if t := firstString(w.Type); t != "" && t != "Multikey" {
				continue
			}
			k.PublicKeyMultibase = firstString(w.PublicKeyMultibase)
			if k.PublicKeyMultibase == "" {
				continue
			}
		}
		if k.Owner == "" {
			k.Owner = firstID(w.Controller)
		}
		out = append(out, k)
	}
	return out
}
