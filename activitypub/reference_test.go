package activitypub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// This file holds the reference decoder the one-pass decoder of decode.go
// must agree with: the decoder courier used before, which decodes the
// document into json.RawMessage properties with encoding/json and each
// property again. The differential tests and fuzz targets compare the two.

// wire is the loose shape of the properties of an activity, an object or a
// tag, into which the reference decoder decodes them.
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
	Proof        json.RawMessage `json:"proof"`
	Signature    json.RawMessage `json:"signature"`
}

// refParseActivity decodes an activity. It requires a JSON object with non-empty
// "id", "type" and "actor"; a missing one is reported as *MissingFieldError.
// Everything else is optional and decoded tolerantly.
func refParseActivity(data []byte) (*Activity, error) {
	var w wire
	if err := refDecodeObject(data, &w); err != nil {
		return nil, err
	}
	a := &Activity{
		ID:        refFirstString(w.ID),
		Type:      refFirstString(w.Type),
		Actor:     refFirstID(w.Actor),
		ObjectID:  refFirstID(w.Object),
		Target:    refFirstID(w.Target),
		To:        refIDs(w.To),
		Cc:        refIDs(w.Cc),
		Bto:       refIDs(w.Bto),
		Bcc:       refIDs(w.Bcc),
		Audience:  refIDs(w.Audience),
		Published: refParseTime(w.Published),
		Updated:   refParseTime(w.Updated),
		Content:   refStringOrMap(w.Content),
		Summary:   refStringOrMap(w.Summary),
		InReplyTo: refFirstID(w.InReplyTo),
		Proof:     refRawProp(w.Proof),
		Signature: refRawProp(w.Signature),
		Raw:       json.RawMessage(bytes.Clone(bytes.TrimSpace(data))),
	}
	if len(w.Object) > 0 && !refIsNull(w.Object) {
		a.ObjectRaw = w.Object
		a.Object = refEmbeddedObject(w.Object)
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

// refRawProp is a property's raw value, nil when absent or null.
func refRawProp(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || refIsNull(v) {
		return nil
	}
	return v
}

// refParseObject decodes an object. It requires a JSON object with a non-empty
// "type"; the id may be empty (transient objects have none).
func refParseObject(data []byte) (*Object, error) {
	o, err := refParseObjectAny(data)
	if err != nil {
		return nil, err
	}
	if o.Type == "" {
		return nil, &MissingFieldError{Field: "type"}
	}
	return o, nil
}

func refParseObjectAny(data []byte) (*Object, error) {
	var w wire
	if err := refDecodeObject(data, &w); err != nil {
		return nil, err
	}
	o := &Object{
		ID:           refFirstString(w.ID),
		Type:         refFirstString(w.Type),
		AttributedTo: refIDs(w.AttributedTo),
		Actor:        refFirstID(w.Actor),
		ObjectID:     refFirstID(w.Object),
		To:           refIDs(w.To),
		Cc:           refIDs(w.Cc),
		Bto:          refIDs(w.Bto),
		Bcc:          refIDs(w.Bcc),
		Audience:     refIDs(w.Audience),
		Name:         refStringOrMap(w.Name),
		Summary:      refStringOrMap(w.Summary),
		Content:      refStringOrMap(w.Content),
		MediaType:    refFirstString(w.MediaType),
		URL:          refFirstID(w.URL),
		InReplyTo:    refFirstID(w.InReplyTo),
		Published:    refParseTime(w.Published),
		Updated:      refParseTime(w.Updated),
		Tag:          refParseTags(w.Tag),
		Raw:          json.RawMessage(bytes.Clone(bytes.TrimSpace(data))),
	}
	_ = json.Unmarshal(w.Sensitive, &o.Sensitive)
	return o, nil
}

// refEmbeddedObject decodes raw as an object when it is a JSON object.
func refEmbeddedObject(raw json.RawMessage) *Object {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	o, err := refParseObjectAny(raw)
	if err != nil {
		return nil
	}
	return o
}

func refDecodeObject(data []byte, w *wire) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	if err := json.Unmarshal(data, w); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// refIDs returns the ids in a reference property that may be a string, an object
// with "id" (or a Link with "href"), or a list of those. Empty entries and
// values of other JSON types are skipped; null or absent gives nil.
func refIDs(raw json.RawMessage) []string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case '"', '{':
		if id := refSingleID(raw); id != "" {
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
			if id := refSingleID(it); id != "" {
				out = append(out, id)
			}
		}
		return out
	}
	return nil
}

// refFirstID returns the first id of a reference property, or "".
func refFirstID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '[' {
		if ids := refIDs(raw); len(ids) > 0 {
			return ids[0]
		}
		return ""
	}
	return refSingleID(raw)
}

// refSingleID reads a string, or the id (else href) of an object.
func refSingleID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return refFirstString(raw)
	case '{':
		var ref struct {
			ID   json.RawMessage `json:"id"`
			Href json.RawMessage `json:"href"`
		}
		if json.Unmarshal(raw, &ref) == nil {
			if id := refFirstString(ref.ID); id != "" {
				return id
			}
			return refFirstString(ref.Href)
		}
	}
	return ""
}

// refFirstString reads a string, or the first string of a list of strings.
func refFirstString(raw json.RawMessage) string {
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

// refStringOrMap reads a string, or falls back to a natural-language map
// ({"en": "..."}) choosing "und", "en" or else the lexically first language.
func refStringOrMap(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return refFirstString(raw)
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
	// The package's choice, made deterministic: the lexically first
	// language other than "" (a map iterated in random order made it
	// depend on the order when "" was a key).
	best := ""
	for k := range m {
		if k != "" && (best == "" || k < best) {
			best = k
		}
	}
	return m[best]
}

// refParseTime reads an xsd:dateTime string; anything else gives the zero
// time (the layouts are parseTimeString's, which the rewrite kept).
func refParseTime(raw json.RawMessage) time.Time {
	return parseTimeString(refFirstString(raw))
}

// refParseTags reads a tag property: one tag object or a list of them.
func refParseTags(raw json.RawMessage) []Tag {
	var out []Tag
	for _, it := range objectItems(raw) {
		var w wire
		if refDecodeObject(it, &w) != nil {
			continue
		}
		t := Tag{Type: refFirstString(w.Type), Name: refStringOrMap(w.Name), Href: refFirstID(w.URL)}
		var href struct {
			Href json.RawMessage `json:"href"`
		}
		if json.Unmarshal(it, &href) == nil {
			if h := refFirstString(href.Href); h != "" {
				t.Href = h
			}
		}
		if t.Href == "" {
			t.Href = refFirstString(w.ID)
		}
		out = append(out, t)
	}
	return out
}

func refIsNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}
