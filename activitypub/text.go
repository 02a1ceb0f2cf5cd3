package activitypub

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// ErrText: a document is not valid UTF-8, holds a NUL character, or names
// a URL with a control character. Such text cannot be kept alike by every
// store (PostgreSQL refuses it, so a copy from SQLite would stop on it).
var ErrText = errors.New("activitypub: text no store can keep")

// CheckText refuses (ErrText) a JSON document that is not valid UTF-8 or
// holds a NUL character (\u0000) in any of its strings.
func CheckText(doc []byte) error {
	if !utf8.Valid(doc) {
		return fmt.Errorf("%w: the document is not valid UTF-8", ErrText)
	}
	if !bytes.Contains(doc, []byte(`\u0000`)) {
		return nil
	}
	// Only an escape that decodes to NUL counts (not "\\u0000", a
	// backslash and text): decode and look.
	d := json.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return nil // not JSON: the parser says so
		}
		if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("%w: a string holds a NUL character (\\u0000)", ErrText)
		}
	}
}

// CheckURL refuses (ErrText) a URL holding a control character (C0, DEL
// or C1, NUL included) or invalid UTF-8; field names it in the error.
func CheckURL(field, u string) error {
	if !utf8.ValidString(u) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrText, field)
	}
	for _, r := range u {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return fmt.Errorf("%w: %s holds the control character %U", ErrText, field, r)
		}
	}
	return nil
}

// CheckActivityURLs applies CheckURL to every URL field of a: its id,
// actor, object, target, inReplyTo and audience, and those of its embedded
// object (id, attributedTo, actor, object, url, inReplyTo, audience, tag
// hrefs).
func CheckActivityURLs(a *Activity) error {
	check := func(field string, vs ...string) error {
		for _, v := range vs {
			if err := CheckURL(field, v); err != nil {
				return err
			}
		}
		return nil
	}
	if err := errors.Join(check("id", a.ID), check("actor", a.Actor), check("object", a.ObjectID),
		check("target", a.Target), check("inReplyTo", a.InReplyTo), check("to", a.To...), check("cc", a.Cc...),
		check("bto", a.Bto...), check("bcc", a.Bcc...), check("audience", a.Audience...)); err != nil {
		return err
	}
	o := a.Object
	if o == nil {
		return nil
	}
	var hrefs []string
	for _, t := range o.Tag {
		hrefs = append(hrefs, t.Href)
	}
	return errors.Join(check("object.id", o.ID), check("object.attributedTo", o.AttributedTo...),
		check("object.actor", o.Actor), check("object.object", o.ObjectID), check("object.url", o.URL),
		check("object.inReplyTo", o.InReplyTo), check("object.to", o.To...), check("object.cc", o.Cc...),
		check("object.bto", o.Bto...), check("object.bcc", o.Bcc...), check("object.audience", o.Audience...),
		check("object.tag.href", hrefs...))
}
