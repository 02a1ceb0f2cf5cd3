package activitypub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
// Raw keeps the whole document.
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

// wire is the loose shape both activities and objects are first decoded into.
type wire struct {
	ID           json.RawMessage `json:"id"`
	Type         json.RawMessage `json:"type"`
	Actor        json.RawMessage `json:"actor"`
	Object       json.RawMessage `json:"object"`
	Target       json.RawMessage `json:"target"`
	AttributedTo json.RawMessage `json:"attributedTo"`
	To           json.RawMessage `json:"to"`
	Cc           json.RawMessage `json:"cc"`
	Bto          json.RawMessage `json:"bto"`
	Bcc          json.RawMessage `json:"bcc"`
	Audience     json.RawMessage `json:"audience"`
	Published    json.RawMessage `json:"published"`
	Updated      json.RawMessage `json:"updated"`
	Name         json.RawMessage `json:"name"`
	Summary      json.RawMessage `json:"summary"`
	Content      json.RawMessage `json:"content"`
	MediaType    json.RawMessage `json:"mediaType"`
	URL          json.RawMessage `json:"url"`
	InReplyTo    json.RawMessage `json:"inReplyTo"`
	Sensitive    json.RawMessage `json:"sensitive"`
	Tag          json.RawMessage `json:"tag"`
}

// ParseActivity decodes an activity. It requires a JSON object with non-empty
// "id", "type" and "actor"; a missing one is reported as *MissingFieldError.
// Everything else is optional and decoded tolerantly.
func ParseActivity(data []byte) (*Activity, error) {
	var w wire
	if err := decodeObject(data, &w); err != nil {
		return nil, err
	}
	a := &Activity{
		ID:        firstString(w.ID),
		Type:      firstString(w.Type),
		Actor:     firstID(w.Actor),
		ObjectID:  firstID(w.Object),
		Target:    firstID(w.Target),
		To:        IDs(w.To),
		Cc:        IDs(w.Cc),
		Bto:       IDs(w.Bto),
		Bcc:       IDs(w.Bcc),
		Audience:  IDs(w.Audience),
		Published: parseTime(w.Published),
		Updated:   parseTime(w.Updated),
		Content:   stringOrMap(w.Content),
		Summary:   stringOrMap(w.Summary),
		InReplyTo: firstID(w.InReplyTo),
		Raw:       json.RawMessage(bytes.Clone(bytes.TrimSpace(data))),
	}
	if len(w.Object) > 0 && !isNull(w.Object) {
		a.ObjectRaw = w.Object
		a.Object = embeddedObject(w.Object)
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

// ParseObject decodes an object. It requires a JSON object with a non-empty
// "type"; the id may be empty (transient objects have none).
func ParseObject(data []byte) (*Object, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	if o.Type == "" {
		return nil, &MissingFieldError{Field: "type"}
	}
	return o, nil
}

func parseObject(data []byte) (*Object, error) {
	var w wire
	if err := decodeObject(data, &w); err != nil {
		return nil, err
	}
	o := &Object{
		ID:           firstString(w.ID),
		Type:         firstString(w.Type),
		AttributedTo: IDs(w.AttributedTo),
		Actor:        firstID(w.Actor),
		ObjectID:     firstID(w.Object),
		To:           IDs(w.To),
		Cc:           IDs(w.Cc),
		Bto:          IDs(w.Bto),
		Bcc:          IDs(w.Bcc),
		Audience:     IDs(w.Audience),
		Name:         stringOrMap(w.Name),
		Summary:      stringOrMap(w.Summary),
		Content:      stringOrMap(w.Content),
		MediaType:    firstString(w.MediaType),
		URL:          firstID(w.URL),
		InReplyTo:    firstID(w.InReplyTo),
		Published:    parseTime(w.Published),
		Updated:      parseTime(w.Updated),
		Tag:          parseTags(w.Tag),
		Raw:          json.RawMessage(bytes.Clone(bytes.TrimSpace(data))),
	}
	_ = json.Unmarshal(w.Sensitive, &o.Sensitive)
	return o, nil
}

// embeddedObject decodes raw as an object when it is a JSON object.
func embeddedObject(raw json.RawMessage) *Object {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	o, err := parseObject(raw)
	if err != nil {
		return nil
	}
	return o
}

func decodeObject(data []byte, w *wire) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(data, w); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// IDs returns the ids in a reference property that may be a string, an object
// with "id" (or a Link with "href"), or a list of those. Empty entries and
// values of other JSON types are skipped; null or absent gives nil.
func IDs(raw json.RawMessage) []string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"', '{':
		if id := singleID(raw); id != "" {
			return []string{id}
		}
		return nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil
		}
		var out []string
		for _, it := range items {
			if id := singleID(it); id != "" {
				out = append(out, id)
			}
		}
		return out
	}
	return nil
}

// firstID returns the first id of a reference property, or "".
func firstID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '[' {
		if ids := IDs(raw); len(ids) > 0 {
			return ids[0]
		}
		return ""
	}
	return singleID(raw)
}

// singleID reads a string, or the id (else href) of an object.
func singleID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return firstString(raw)
	case '{':
		var ref struct {
			ID   json.RawMessage `json:"id"`
			Href json.RawMessage `json:"href"`
		}
		if json.Unmarshal(raw, &ref) == nil {
			if id := firstString(ref.ID); id != "" {
				return id
			}
			return firstString(ref.Href)
		}
	}
	return ""
}

// firstString reads a string, or the first string of a list of strings.
func firstString(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			for _, it := range items {
				var s string
				if json.Unmarshal(it, &s) == nil && s != "" {
					return s
				}
			}
		}
	}
	return ""
}

// stringOrMap reads a string, or falls back to a natural-language map
// ({"en": "..."}) choosing "und", "en" or else the lexically first language.
func stringOrMap(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return firstString(raw)
	}
	if raw[0] != '{' {
		return ""
	}
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	for _, k := range []string{"und", "en"} {
		if v, ok := m[k]; ok {
			return v
		}
	}
	best := ""
	for k := range m {
		if best == "" || k < best {
			best = k
		}
	}
	return m[best]
}

// parseTime reads an xsd:dateTime string; anything else gives the zero time.
func parseTime(raw json.RawMessage) time.Time {
	s := firstString(raw)
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

// parseTags reads a tag property: one tag object or a list of them.
func parseTags(raw json.RawMessage) []Tag {
	var out []Tag
	for _, it := range objectItems(raw) {
		var w wire
		if decodeObject(it, &w) != nil {
			continue
		}
		t := Tag{Type: firstString(w.Type), Name: stringOrMap(w.Name), Href: firstID(w.URL)}
		var href struct {
			Href json.RawMessage `json:"href"`
		}
		if json.Unmarshal(it, &href) == nil {
			if h := firstString(href.Href); h != "" {
				t.Href = h
			}
		}
		if t.Href == "" {
			t.Href = firstString(w.ID)
		}
		out = append(out, t)
	}
	return out
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
