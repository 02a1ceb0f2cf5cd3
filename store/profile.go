package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// An actor's profile beyond its name and summary: avatar (icon), header
// (image), PropertyValue fields (attachment), discoverable, indexable and
// alsoKnownAs, kept as one JSON object in actors.profile_json (migration
// 0026) and served in the actor document. A client sets them by an Update
// of the actor (package server); the Update federates to followers as for
// name and summary.
//
// A field's value is kept as plain text. What a client sends is read as
// HTML without markup: character references (&amp;) are decoded, and
// markup is refused (courier has no HTML sanitiser, and keeping HTML it
// cannot vouch for, or dropping its markup, would lose or alter what the
// client sent), except the link courier itself serves (below), read back
// as its URL, so that a served document sent back is kept as it was. It
// is served HTML-escaped, as Mastodon reads a field's value as HTML; a
// value that is one absolute http(s) URL is served as a link with
// rel="me", the form Mastodon verifies.

// Bounds of the profile.
const (
	MaxProfileFields     = 16    // attachment PropertyValues (Misskey's bound; Mastodon shows 4)
	MaxFieldNameLen      = 255   // characters
	MaxFieldValueLen     = 2_048 // characters
	MaxAlsoKnownAs       = 16
	MaxProfileURLLen     = 2_048 // bytes
	MaxImageMediaTypeLen = 100
)

// Image is an icon or header image by URL (courier hosts no media).
type Image struct {
	URL       string `json:"url"`
	MediaType string `json:"mediaType,omitempty"`
}

// ProfileField is one PropertyValue of the actor's attachment.
type ProfileField struct {
	Name  string `json:"name"`
	Value string `json:"value"` // plain text
}

// Profile is an actor's profile beyond name and summary. Nil and empty
// fields are not served.
type Profile struct {
	Icon         *Image         `json:"icon,omitempty"`
	Image        *Image         `json:"image,omitempty"`
	Fields       []ProfileField `json:"fields,omitempty"`
	Discoverable *bool          `json:"discoverable,omitempty"`
	Indexable    *bool          `json:"indexable,omitempty"`
	AlsoKnownAs  []string       `json:"alsoKnownAs,omitempty"`
}

func (p *Profile) decode(s string) error {
	*p = Profile{}
	if s == "" || s == "{}" {
		return nil
	}
	if err := json.Unmarshal([]byte(s), p); err != nil {
		return wrap("actor profile", err)
	}
	return nil
}

// ProfileUpdate changes what it sets. A Set flag with a nil or empty value
// clears the property.
type ProfileUpdate struct {
	SetIcon, SetImage, SetFields, SetAlsoKnownAs bool

	Icon, Image  *Image
	Fields       []ProfileField
	AlsoKnownAs  []string
	Discoverable *bool
	Indexable    *bool
}

// Validate checks u's bounds and shapes: image URLs and alsoKnownAs are
// absolute http or https URLs (which scheme the caller allows is its
// business); field names and values are text (FieldText reads a client's).
func (u *ProfileUpdate) Validate() error {
	for _, img := range []struct {
		name string
		i    *Image
	}{{"icon", u.Icon}, {"image", u.Image}} {
		if img.i == nil {
			continue
		}
		if err := checkProfileURL(img.name+" url", img.i.URL); err != nil {
			return err
		}
		if len(img.i.MediaType) > MaxImageMediaTypeLen || (img.i.MediaType != "" && !strings.HasPrefix(img.i.MediaType, "image/")) {
			return Errorf(EUNPROCESSABLE, "%s mediaType %q is not an image type", img.name, img.i.MediaType)
		}
	}
	if len(u.Fields) > MaxProfileFields {
		return Errorf(EUNPROCESSABLE, "attachment has %d fields; at most %d are kept", len(u.Fields), MaxProfileFields)
	}
	for i, f := range u.Fields {
		switch {
		case !utf8.ValidString(f.Name) || !utf8.ValidString(f.Value):
			return Errorf(EINVALID, "attachment field %d is not UTF-8", i)
		case strings.TrimSpace(f.Name) == "":
			return Errorf(EUNPROCESSABLE, "attachment field %d has no name", i)
		case utf8.RuneCountInString(f.Name) > MaxFieldNameLen:
			return Errorf(EUNPROCESSABLE, "attachment field %d: name is longer than %d characters", i, MaxFieldNameLen)
		case utf8.RuneCountInString(f.Value) > MaxFieldValueLen:
			return Errorf(EUNPROCESSABLE, "attachment field %d: value is longer than %d characters", i, MaxFieldValueLen)
		}
	}
	if len(u.AlsoKnownAs) > MaxAlsoKnownAs {
		return Errorf(EUNPROCESSABLE, "alsoKnownAs has %d entries; at most %d are kept", len(u.AlsoKnownAs), MaxAlsoKnownAs)
	}
	for _, aka := range u.AlsoKnownAs {
		if err := checkProfileURL("alsoKnownAs", aka); err != nil {
			return err
		}
	}
	return nil
}

func checkProfileURL(what, s string) error {
	if len(s) > MaxProfileURLLen {
		return Errorf(EUNPROCESSABLE, "%s is longer than %d bytes", what, MaxProfileURLLen)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return Errorf(EUNPROCESSABLE, "%s %q is not an absolute http(s) URL", what, s)
	}
	return nil
}

// updateProfileTx applies u to a's profile and writes it, in tx.
func (s *Store) updateProfileTx(ctx context.Context, tx *sql.Tx, a *Actor, u *ProfileUpdate) error {
	if err := u.Validate(); err != nil {
		return err
	}
	p := a.Profile
	if u.SetIcon {
		p.Icon = u.Icon
	}
	if u.SetImage {
		p.Image = u.Image
	}
	if u.SetFields {
		p.Fields = u.Fields
	}
	if u.SetAlsoKnownAs {
		p.AlsoKnownAs = u.AlsoKnownAs
	}
	if u.Discoverable != nil {
		p.Discoverable = u.Discoverable
	}
	if u.Indexable != nil {
		p.Indexable = u.Indexable
	}
	b, err := json.Marshal(p)
	if err != nil {
		return wrap("actor profile", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE actors SET profile_json = ? WHERE id = ?`, string(b), a.ID); err != nil {
		return wrap("actor profile", err)
	}
	a.Profile = p
	return nil
}

// ImageDocument is an icon or image of an actor document.
type ImageDocument struct {
	Type      string `json:"type"`
	MediaType string `json:"mediaType,omitempty"`
	URL       string `json:"url"`
}

// PropertyValueDocument is one field of an actor document's attachment.
type PropertyValueDocument struct {
	Type  string `json:"type"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

func imageDocument(i *Image) *ImageDocument {
	if i == nil || i.URL == "" {
		return nil
	}
	return &ImageDocument{Type: "Image", MediaType: i.MediaType, URL: i.URL}
}

// fieldValueHTML is a field's value as served: HTML-escaped text, and a
// lone http(s) URL as a rel="me" link.
func fieldValueHTML(v string) string {
	esc := html.EscapeString(v)
	if checkProfileURL("", v) == nil && !strings.ContainsAny(v, " \t\n") {
		return `<a href="` + esc + `" rel="me nofollow noopener noreferrer" target="_blank">` + esc + `</a>`
	}
	return esc
}

// servedLink matches the link fieldValueHTML serves.
var servedLink = regexp.MustCompile(`^<a href="([^"<>]*)" rel="me nofollow noopener noreferrer" target="_blank">([^"<>]*)</a>$`)

// FieldText returns the plain text of a field's name or value as a client
// sent it (see the package's profile notes), or EUNPROCESSABLE for markup.
func FieldText(what, v string) (string, error) {
	if m := servedLink.FindStringSubmatch(v); m != nil && m[1] == m[2] {
		return html.UnescapeString(m[1]), nil
	}
	if strings.ContainsRune(v, '<') {
		return "", Errorf(EUNPROCESSABLE, "%s is plain text; HTML markup is not accepted", what)
	}
	return html.UnescapeString(v), nil
}

// setProfile puts p into the actor document d.
func (d *ActorDocument) setProfile(p Profile) {
	d.Icon, d.Image = imageDocument(p.Icon), imageDocument(p.Image)
	for _, f := range p.Fields {
		d.Attachment = append(d.Attachment, PropertyValueDocument{Type: "PropertyValue", Name: f.Name, Value: fieldValueHTML(f.Value)})
	}
	d.Discoverable, d.Indexable = p.Discoverable, p.Indexable
	d.AlsoKnownAs = p.AlsoKnownAs
}
