package activitypub

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"
)

// ErrMalformed is returned (wrapped) when a remote document is not a JSON
// object of the expected shape. *MissingFieldError unwraps to it.
var ErrMalformed = errors.New("activitypub: malformed document")

// MissingFieldError reports a required property that is absent or empty.
type MissingFieldError struct {
	// Field is the JSON property name, e.g. "actor".
	Field string
}

func (e *MissingFieldError) Error() string {
	return "activitypub: missing " + e.Field
}

// Unwrap makes a MissingFieldError match ErrMalformed.
func (e *MissingFieldError) Unwrap() error { return ErrMalformed }

// Activity is a decoded activity, tolerant of the shapes real servers send.
// Reference properties that may be an id, an embedded object or a list are
// reduced to ids; the embedded object, when there is one, is decoded too, and
// Raw keeps the whole document. Raw, ObjectRaw and Object.Raw are views of
// one copy of the input, never of the caller's buffer: treat them as
// read-only.
type Activity struct {
	// ID is the activity's id.
	ID string
	// Type is the activity's type (the first one when "type" is a list).
	Type string
	// Actor is the id of the actor (the first when "actor" is a list).
	Actor string
	// ObjectID is the id of the object, whether given by id or embedded.
	ObjectID string
	// Object is the embedded object, nil when the object is given by id only.
	Object *Object
	// ObjectRaw is the "object" property exactly as received (nil if absent).
	ObjectRaw json.RawMessage
	// Target is the id of "target" (Add/Remove/Move), if any.
	Target string
	// To, Cc, Bto, Bcc and Audience are the addressing, as ids.
	To, Cc, Bto, Bcc, Audience []string
	// Published and Updated are zero when absent or unparseable.
	Published, Updated time.Time
	// Content is the activity's own content, if any.
	Content string
	// Summary is the activity's summary (Flag reasons, for instance).
	Summary string
	// InReplyTo is the id of "inReplyTo", if any.
	InReplyTo string
	// Proof is the "proof" property exactly as received (FEP-8b32
	// integrity proofs; nil if absent): see ParseProofs.
	Proof json.RawMessage
	// Signature is the "signature" property exactly as received (a Linked
	// Data signature, RsaSignature2017; nil if absent).
	Signature json.RawMessage
	// Raw is the whole document as received.
	Raw json.RawMessage
}

// Object is a decoded object (Note, Article, Page, Person, Tombstone, or an
// embedded activity such as the Follow inside an Undo).
type Object struct {
	// ID is the object's id (may be empty for transient embedded objects).
	ID string
	// Type is the object's type (the first one when "type" is a list).
	Type string
	// AttributedTo holds the ids of "attributedTo" (string, object or list).
	AttributedTo []string
	// Actor and ObjectID are set when the object is itself an activity.
	Actor    string
	ObjectID string
	// To, Cc, Bto, Bcc and Audience are the addressing, as ids.
	To, Cc, Bto, Bcc, Audience []string
	// Name, Summary and Content are the textual properties (content as HTML).
	Name, Summary, Content string
	// MediaType is the content's media type when given.
	MediaType string
	// URL is the first "url" (string, Link or list).
	URL string
	// InReplyTo is the id of "inReplyTo", if any.
	InReplyTo string
	// Published and Updated are zero when absent or unparseable.
	Published, Updated time.Time
	// Sensitive mirrors the "sensitive" extension.
	Sensitive bool
	// Tag holds the tags (mentions, hashtags, emoji).
	Tag []Tag
	// Raw is the object as received.
	Raw json.RawMessage
}

// Tag is one entry of an object's "tag" list.
type Tag struct {
	Type string `json:"type,omitempty"`
	Name string `json:"name,omitempty"`
	Href string `json:"href,omitempty"`
}

// ParseActivity decodes an activity. It requires a JSON object with non-empty
// "id", "type" and "actor"; a missing one is reported as *MissingFieldError.
// Everything else is optional and decoded tolerantly.
func ParseActivity(data []byte) (*Activity, error) {
	p, doc, err := decodeProps(data)
	if err != nil {
		return nil, err
	}
	a := &Activity{
		ID:        vFirstString(p[pID]),
		Type:      vFirstString(p[pType]),
		Actor:     vFirstID(p[pActor]),
		Target:    vFirstID(p[pTarget]),
		To:        vIDs(p[pTo]),
		Cc:        vIDs(p[pCc]),
		Bto:       vIDs(p[pBto]),
		Bcc:       vIDs(p[pBcc]),
		Audience:  vIDs(p[pAudience]),
		Published: vTime(p[pPublished]),
		Updated:   vTime(p[pUpdated]),
		Content:   vStringOrMap(p[pContent]),
		Summary:   vStringOrMap(p[pSummary]),
		InReplyTo: vFirstID(p[pInReplyTo]),
		Proof:     rawProp(p[pProof]),
		Signature: rawProp(p[pSignature]),
		Raw:       json.RawMessage(doc),
	}
	obj := p[pObject]
	if len(obj) == 0 || obj[0] != '{' {
		a.ObjectID = vFirstID(obj)
	}
	if len(obj) > 0 && string(obj) != "null" {
		a.ObjectRaw = json.RawMessage(obj)
		if obj[0] == '{' {
			// The object's id, as vFirstID would read it, from the
			// properties read once for both.
			op := objectProps(obj)
			a.Object = newObject(op, obj)
			if a.ObjectID = a.Object.ID; a.ObjectID == "" {
				a.ObjectID = vFirstString(op[pHref])
			}
		}
	}
	switch {
	case a.ID == "":
		return nil, &MissingFieldError{Field: "id"}
	case a.Type == "":
		return nil, &MissingFieldError{Field: "type"}
	case a.Actor == "":
		return nil, &MissingFieldError{Field: "actor"}
	}
	return a, nil
}

// rawProp returns a property's raw value, nil when absent or null.
func rawProp(v []byte) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return json.RawMessage(v)
}

// ParseObject decodes an object. It requires a JSON object with a non-empty
// "type"; the id may be empty (transient objects have none).
func ParseObject(data []byte) (*Object, error) {
	p, doc, err := decodeProps(data)
	if err != nil {
		return nil, err
	}
	o := newObject(p, doc)
	if o.Type == "" {
		return nil, &MissingFieldError{Field: "type"}
	}
	return o, nil
}

// newObject builds the Object of the properties p of the object doc.
func newObject(p props, doc []byte) *Object {
	return &Object{
		ID:           vFirstString(p[pID]),
		Type:         vFirstString(p[pType]),
		AttributedTo: vIDs(p[pAttributedTo]),
		Actor:        vFirstID(p[pActor]),
		ObjectID:     vFirstID(p[pObject]),
		To:           vIDs(p[pTo]),
		Cc:           vIDs(p[pCc]),
		Bto:          vIDs(p[pBto]),
		Bcc:          vIDs(p[pBcc]),
		Audience:     vIDs(p[pAudience]),
		Name:         vStringOrMap(p[pName]),
		Summary:      vStringOrMap(p[pSummary]),
		Content:      vStringOrMap(p[pContent]),
		MediaType:    vFirstString(p[pMediaType]),
		URL:          vFirstID(p[pURL]),
		InReplyTo:    vFirstID(p[pInReplyTo]),
		Published:    vTime(p[pPublished]),
		Updated:      vTime(p[pUpdated]),
		Sensitive:    string(p[pSensitive]) == "true",
		Tag:          vTags(p[pTag]),
		Raw:          json.RawMessage(doc),
	}
}

// IDs returns the ids in a reference property that may be a string, an object
// with "id" (or a Link with "href"), or a list of those. Empty entries and
// values of other JSON types are skipped; null, absent or invalid JSON gives
// nil.
func IDs(raw json.RawMessage) []string {
	v, ok := validRaw(raw)
	if !ok {
		return nil
	}
	return vIDs(v)
}

// The reducers of json.RawMessage properties (actor and NodeInfo documents)
// give the zero value for anything that is not one valid JSON value.

// firstID returns the first id of a reference property, or "".
func firstID(raw json.RawMessage) string {
	v, ok := validRaw(raw)
	if !ok {
		return ""
	}
	return vFirstID(v)
}

// firstString reads a string, or the first string of a list of strings.
func firstString(raw json.RawMessage) string {
	v, ok := validRaw(raw)
	if !ok {
		return ""
	}
	return vFirstString(v)
}

// stringOrMap reads a string, or falls back to a natural-language map
// ({"en": "..."}) choosing "und", "en" or else the lexically first language.
func stringOrMap(raw json.RawMessage) string {
	v, ok := validRaw(raw)
	if !ok {
		return ""
	}
	return vStringOrMap(v)
}

// parseTimeString reads an xsd:dateTime; anything else gives the zero time.
func parseTimeString(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// objectItems reads a property that holds one object or a list of them:
// the items as raw JSON, nil for anything else.
func objectItems(raw json.RawMessage) []json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '{':
		return []json.RawMessage{raw}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			return items
		}
	}
	return nil
}
