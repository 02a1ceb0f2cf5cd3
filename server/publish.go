package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// The client-to-server outbox carries objects whole: every property the
// client sent is kept in the object's document, served at /objects/{id} and
// federated in its Create and Update; the server sets id, type,
// attributedTo, published, updated, to and cc (and url when the client gave
// none). What cannot be carried is refused with 422 naming it, and so is
// what a client may not say, under any JSON-LD spelling (checkLD,
// jsonld.go). See docs/publishing.md.

// activityTypes are the ActivityStreams activity types (and the common
// extensions): never published as objects.
var activityTypes = map[string]bool{
	"Accept": true, "Add": true, "Announce": true, "Arrive": true, "Block": true, "Create": true,
	"Delete": true, "Dislike": true, "Flag": true, "Follow": true, "Ignore": true, "Invite": true,
	"Join": true, "Leave": true, "Like": true, "Listen": true, "Move": true, "Offer": true,
	"Reject": true, "Read": true, "Remove": true, "TentativeReject": true,
	"TentativeAccept": true, "Travel": true, "Undo": true, "Update": true, "View": true,
	"EmojiReact": true, "Activity": true, "IntransitiveActivity": true,
}

// refusedTypes are ActivityStreams types that are not content a client
// publishes: actors, collections, links and tombstones.
var refusedTypes = map[string]bool{
	"Person": true, "Service": true, "Application": true, "Group": true, "Organization": true,
	"Collection": true, "OrderedCollection": true, "CollectionPage": true, "OrderedCollectionPage": true,
	"Link": true, "Mention": true, "Hashtag": true, "Tombstone": true, "Profile": true, "Relationship": true,
	"Object": true,
}

// serverProperties are set by the server over the client's.
var serverProperties = []string{"id", "attributedTo", "actor", "published", "updated", "@context", "quoteAuthorization"}

// ownedProperties are collections the server keeps; a client's are refused.
var ownedProperties = []string{"likes", "shares", "replies"}

// createProperties are the properties of a Create around an object that the
// server reads; any other is refused (it would be lost).
var createProperties = []string{"@context", "id", "type", "actor", "object", "to", "cc", "bto", "bcc", "published"}

// decodeDoc decodes a JSON object keeping numbers as json.Number.
func decodeDoc(b []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, store.Errorf(store.EINVALID, "body must be a JSON object")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, store.Errorf(store.EINVALID, "body must be one JSON object")
	}
	return m, nil
}

// rawOf re-encodes a decoded value, for activitypub's readers of ids.
func rawOf(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v) // decoded JSON always encodes
	return b
}

// typeOf returns the type of a decoded object when it is one string.
func typeOf(m map[string]any) (string, error) {
	switch t := m["type"].(type) {
	case string:
		return t, nil
	case nil:
		return "", store.Errorf(store.EINVALID, "the object has no type")
	default:
		return "", store.Errorf(store.EUNPROCESSABLE, "type must be one string, not %s", rawOf(t))
	}
}

// publishable reports why an object of type typ cannot be published; nil
// when it can. custom is whether the client's @context defines terms of its
// own, which a type of its own vocabulary needs.
func publishable(typ string, custom bool) error {
	switch {
	case activitypub.IsContentType(typ):
		return nil
	case activityTypes[typ]:
		return store.Errorf(store.EUNPROCESSABLE, "an embedded %s activity is not supported; only objects can be created", typ)
	case refusedTypes[typ]:
		return store.Errorf(store.EUNPROCESSABLE, "a %s cannot be published as an object", typ)
	case !custom:
		return store.Errorf(store.EUNPROCESSABLE,
			"type %q is not an ActivityStreams object type; define it in the object's @context", typ)
	}
	return nil
}

// publishCreate publishes obj (a bare object, or the object of the Create
// create) as a new object of actor's.
func (s *Server) publishCreate(r *http.Request, actor *store.Actor, obj, create map[string]any) (*store.Activity, error) {
	if question, option, ok := s.voteShape(r, obj); ok {
		if err := checkAuthor(actor, rawOf(obj["actor"]), rawOf(obj["attributedTo"])); err != nil {
			return nil, err
		}
		return s.st.CastVote(r.Context(), actor, question, option)
	}
	in, err := s.objectInput(r, actor, obj, create)
	if err != nil {
		return nil, err
	}
	if q, ok := in.Properties["quote"].(string); ok {
		in.Quote, in.QuotedAuthor = q, s.quotedAuthor(r, q) // quotes.go
	}
	act, _, err := s.st.CreateObject(r.Context(), actor, in)
	return act, err
}

// publishUpdate replaces the client properties of actor's own object id
// with obj's.
func (s *Server) publishUpdate(r *http.Request, actor *store.Actor, id string, obj map[string]any) (*store.Activity, error) {
	in, err := s.objectInput(r, actor, obj, nil)
	if err != nil {
		return nil, err
	}
	act, _, err := s.st.UpdateObject(r.Context(), actor, id, in)
	return act, err
}

// objectInput checks a client's object (and the Create around it, if any)
// and builds what the store keeps.
func (s *Server) objectInput(r *http.Request, actor *store.Actor, obj, create map[string]any) (store.ObjectInput, error) {
	var in store.ObjectInput
	typ, err := typeOf(obj)
	if err != nil {
		return in, err
	}
	for k := range create {
		if !slices.Contains(createProperties, k) {
			return in, store.Errorf(store.EUNPROCESSABLE, "the Create's property %q is not carried; set it on the object", k)
		}
	}
	if err := checkAuthor(actor, rawOf(obj["actor"]), rawOf(obj["attributedTo"])); err != nil {
		return in, err
	}
	for _, m := range []map[string]any{obj, create} {
		if m != nil && len(activitypub.IDs(rawOf(m["bto"])))+len(activitypub.IDs(rawOf(m["bcc"]))) > 0 {
			return in, store.Errorf(store.EUNPROCESSABLE, "bto and bcc are not supported; address recipients in to or cc")
		}
	}
	if in.Context, err = clientContext(obj["@context"], create); err != nil {
		return in, err
	}
	if err := publishable(typ, len(in.Context) > 0); err != nil {
		return in, err
	}
	for _, k := range ownedProperties {
		if _, ok := obj[k]; ok {
			return in, store.Errorf(store.EUNPROCESSABLE, "%q is kept by the server and cannot be set", k)
		}
	}
	props := make(map[string]any, len(obj))
	for k, v := range obj {
		if !slices.Contains(serverProperties, k) && k != "bto" && k != "bcc" {
			props[k] = v
		}
	}
	in.Type, in.Properties = typ, props
	in.To, in.CC = activitypub.IDs(rawOf(obj["to"])), activitypub.IDs(rawOf(obj["cc"]))
	if create != nil {
		in.To = append(in.To, activitypub.IDs(rawOf(create["to"]))...)
		in.CC = append(in.CC, activitypub.IDs(rawOf(create["cc"]))...)
	}
	if in.Content, err = text(obj, "content"); err != nil {
		return in, err
	}
	if in.Summary, err = text(obj, "summary"); err != nil {
		return in, err
	}
	if v, ok := obj["sensitive"]; ok {
		if _, isBool := v.(bool); !isBool {
			return in, store.Errorf(store.EUNPROCESSABLE, "sensitive must be true or false")
		}
	}
	if v, ok := obj["inReplyTo"]; ok && v != nil {
		in.InReplyTo = objectID(rawOf(v))
		if in.InReplyTo == "" {
			return in, store.Errorf(store.EINVALID, "inReplyTo must be an object id")
		}
	}
	if v, ok := obj["url"]; ok {
		if err := s.checkURLs("url", v); err != nil {
			return in, err
		}
	}
	if typ == "Note" && in.Content == "" && obj["attachment"] == nil && obj["contentMap"] == nil {
		return in, store.Errorf(store.EINVALID, "a note needs content")
	}
	if err := s.checkAttachments(props); err != nil {
		return in, err
	}
	if err := s.checkTags(r, props, &in); err != nil {
		return in, err
	}
	if err := checkQuote(props); err != nil {
		return in, err
	}
	if err := checkPoll(typ, props); err != nil {
		return in, err
	}
	// Last, on what is served: the one rule of what a client may say
	// (jsonld.go).
	if err := checkLD(s.uris.Base, in.Context, typ, props); err != nil {
		return in, err
	}
	return in, nil
}

// text reads the string property k of m ("" when absent or null).
func text(m map[string]any, k string) (string, error) {
	switch v := m[k].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", store.Errorf(store.EUNPROCESSABLE, "%s must be a string (use %sMap for languages)", k, k)
	}
}

// clientContext returns the @context entries of the object and of the
// Create around it beyond ActivityStreams, in order, each once. An entry is
// a context URL or an object of term definitions.
func clientContext(objCtx any, create map[string]any) ([]any, error) {
	var out []any
	seen := map[string]bool{}
	add := func(v any) error {
		var l []any
		switch x := v.(type) {
		case nil:
			return nil
		case []any:
			l = x
		default:
			l = []any{x}
		}
		for _, e := range l {
			switch x := e.(type) {
			case string:
				if x == activitypub.ActivityStreams || x == "https://www.w3.org/ns/activitystreams#" {
					continue
				}
				u, err := url.Parse(x)
				if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
					return store.Errorf(store.EUNPROCESSABLE, "@context entry %q is not an absolute URL", x)
				}
			case map[string]any:
				if len(x) == 0 {
					continue
				}
			default:
				return store.Errorf(store.EUNPROCESSABLE, "@context entries must be URLs or objects, not %s", rawOf(e))
			}
			k := string(rawOf(e))
			if !seen[k] {
				seen[k] = true
				out = append(out, e)
			}
		}
		return nil
	}
	if create != nil {
		if err := add(create["@context"]); err != nil {
			return nil, err
		}
	}
	if err := add(objCtx); err != nil {
		return nil, err
	}
	return out, nil
}

// checkURL refuses what is not an absolute https URL (http too when the
// server may reach private addresses, for tests on loopback).
func (s *Server) checkURL(what, raw string) error {
	u, err := url.Parse(raw)
	ok := err == nil && u.Host != "" && u.User == nil &&
		(u.Scheme == "https" || (u.Scheme == "http" && s.cfg.AllowPrivateAddresses))
	if !ok {
		if s.cfg.AllowPrivateAddresses {
			return store.Errorf(store.EUNPROCESSABLE, "%s %q is not an absolute http(s) URL", what, raw)
		}
		return store.Errorf(store.EUNPROCESSABLE, "%s %q is not an absolute https URL", what, raw)
	}
	return nil
}

// checkURLs checks a url property: a URL string, a Link with an href, or
// a list of them.
func (s *Server) checkURLs(what string, v any) error {
	switch x := v.(type) {
	case string:
		return s.checkURL(what, x)
	case map[string]any:
		href, _ := x["href"].(string)
		if href == "" {
			return store.Errorf(store.EUNPROCESSABLE, "%s: a Link needs an href", what)
		}
		return s.checkURL(what, href)
	case []any:
		if len(x) == 0 {
			return store.Errorf(store.EUNPROCESSABLE, "%s is an empty list", what)
		}
		for _, e := range x {
			if err := s.checkURLs(what, e); err != nil {
				return err
			}
		}
		return nil
	}
	return store.Errorf(store.EUNPROCESSABLE, "%s must be a URL or a Link", what)
}

// list returns a property as a list (a single value is a list of one).
func list(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	default:
		return []any{x}
	}
}

// checkAttachments checks the attachments (by URL: courier hosts no media):
// each an object with an absolute https url; numbers where numbers go. An
// attachment without a type gets "Document", as Mastodon needs one.
func (s *Server) checkAttachments(props map[string]any) error {
	v, ok := props["attachment"]
	if !ok || v == nil {
		return nil
	}
	l := list(v)
	out := make([]any, 0, len(l))
	for i, e := range l {
		a, ok := e.(map[string]any)
		if !ok {
			return store.Errorf(store.EUNPROCESSABLE, "attachment %d must be an object with a url", i)
		}
		if t, ok := a["type"].(string); ok && t == "PropertyValue" {
			out = append(out, a)
			continue
		}
		u, ok := a["url"]
		if !ok {
			if href, ok := a["href"]; ok {
				u = href
			} else {
				return store.Errorf(store.EUNPROCESSABLE, "attachment %d has no url (courier hosts no media: give the URL of the file)", i)
			}
		}
		if err := s.checkURLs(fmt.Sprintf("attachment %d url", i), u); err != nil {
			return err
		}
		for _, k := range []string{"width", "height"} {
			if n, ok := a[k]; ok {
				if _, isNum := n.(json.Number); !isNum {
					return store.Errorf(store.EUNPROCESSABLE, "attachment %d %s must be a number", i, k)
				}
			}
		}
		if fp, ok := a["focalPoint"]; ok {
			l, isList := fp.([]any)
			if !isList || len(l) != 2 {
				return store.Errorf(store.EUNPROCESSABLE, "attachment %d focalPoint must be two numbers", i)
			}
			for _, n := range l {
				if _, isNum := n.(json.Number); !isNum {
					return store.Errorf(store.EUNPROCESSABLE, "attachment %d focalPoint must be two numbers", i)
				}
			}
		}
		for _, k := range []string{"mediaType", "name", "blurhash"} {
			if x, ok := a[k]; ok {
				if _, isStr := x.(string); !isStr {
					return store.Errorf(store.EUNPROCESSABLE, "attachment %d %s must be a string", i, k)
				}
			}
		}
		if _, ok := a["type"]; !ok {
			c := make(map[string]any, len(a)+1)
			for k, v := range a {
				c[k] = v
			}
			c["type"] = "Document"
			a = c
		}
		out = append(out, a)
	}
	if _, isList := v.([]any); isList || len(out) != 1 {
		props["attachment"] = out
	} else {
		props["attachment"] = out[0]
	}
	return nil
}

// HashtagName normalises a hashtag's name: without its leading '#', in
// lower case. "" when nothing is left or it holds a character a tag cannot.
func HashtagName(name string) string {
	n := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(name), "#"))
	if n == "" || utf8.RuneCountInString(n) > 100 {
		return ""
	}
	for _, c := range n {
		if c == '/' || c == '?' || c == '#' || c == '%' || c <= ' ' || c == 0x7f {
			return ""
		}
	}
	return n
}

// checkTags checks the tags: a Mention names an actor by href or by
// @user@host (resolved by WebFinger, mentions.go) and puts it among the
// recipients (cc when it is not addressed); a Hashtag gets its href at
// /tags/{name}. Other tags (Emoji...) are kept as sent. More than
// MaxMentions distinct mentions are refused before any lookup.
func (s *Server) checkTags(r *http.Request, props map[string]any, in *store.ObjectInput) error {
	v, ok := props["tag"]
	if !ok || v == nil {
		return nil
	}
	l := list(v)
	out := make([]map[string]any, 0, len(l))
	var refs []mentionRef
	distinct := map[string]bool{}
	for i, e := range l {
		t, ok := e.(map[string]any)
		if !ok {
			return store.Errorf(store.EUNPROCESSABLE, "tag %d must be an object", i)
		}
		c := make(map[string]any, len(t)+1)
		for k, v := range t {
			c[k] = v
		}
		typ, _ := c["type"].(string)
		switch typ {
		case "Mention":
			href, _ := c["href"].(string)
			name, _ := c["name"].(string)
			key := href
			if key == "" {
				key = strings.ToLower(name)
			}
			if distinct[key] = true; len(distinct) > MaxMentions {
				return store.Errorf(store.EUNPROCESSABLE, "an object may mention at most %d actors", MaxMentions)
			}
		case "Hashtag":
			name, _ := c["name"].(string)
			n := HashtagName(name)
			if n == "" {
				return store.Errorf(store.EUNPROCESSABLE, "tag %d: a Hashtag needs a name such as \"#courier\"", i)
			}
			if !strings.HasPrefix(name, "#") {
				c["name"] = "#" + name
			}
			c["href"] = s.uris.Base + "/tags/" + url.PathEscape(n)
			in.Hashtags = append(in.Hashtags, n)
		case "":
			return store.Errorf(store.EUNPROCESSABLE, "tag %d has no type", i)
		}
		out = append(out, c)
	}
	for i, c := range out {
		if c["type"] != "Mention" {
			continue
		}
		m, err := s.readMention(r, i, c)
		if err != nil {
			return err
		}
		refs = append(refs, m)
	}
	if err := s.resolveMentions(r.Context(), refs); err != nil {
		return err
	}
	for _, m := range refs {
		out[m.tag]["href"] = m.href
		if !slices.Contains(in.To, m.href) && !slices.Contains(in.CC, m.href) {
			in.CC = append(in.CC, m.href)
		}
	}
	if _, isList := v.([]any); isList || len(out) != 1 {
		tags := make([]any, len(out))
		for i, c := range out {
			tags[i] = c
		}
		props["tag"] = tags
	} else {
		props["tag"] = out[0]
	}
	return nil
}

// localActorByURI returns the local actor whose id is uri.
func (s *Server) localActorByURI(r *http.Request, uri string) (*store.Actor, error) {
	name, ok := strings.CutPrefix(uri, s.uris.Base+"/users/")
	if !ok || strings.Contains(name, "/") {
		return nil, store.Errorf(store.ENOTFOUND, "no local actor %q", uri)
	}
	return s.st.ActorByName(r.Context(), name)
}

// quoteKeys are the spellings of a quote post's quoted object: FEP-044f,
// the older quoteUrl, and Misskey's.
var quoteKeys = []string{"quote", "quoteUrl", "_misskey_quote"}

// checkQuote sets all of quote, quoteUrl and _misskey_quote from whichever
// the client sent; they must name one object by an absolute URL.
func checkQuote(props map[string]any) error {
	var id string
	for _, k := range quoteKeys {
		v, ok := props[k]
		if !ok || v == nil {
			continue
		}
		q := objectID(rawOf(v))
		u, err := url.Parse(q)
		if q == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return store.Errorf(store.EUNPROCESSABLE, "%s must be the id of the quoted object", k)
		}
		if id != "" && q != id {
			return store.Errorf(store.EUNPROCESSABLE, "quote, quoteUrl and _misskey_quote name different objects")
		}
		id = q
	}
	if id != "" {
		for _, k := range quoteKeys {
			props[k] = id
		}
	}
	return nil
}

// checkPoll checks a Question: oneOf or anyOf (not both), options with
// distinct names, endTime and closed as times. Each option gets its type
// (Note); the counts are the server's.
func checkPoll(typ string, props map[string]any) error {
	_, one := props["oneOf"]
	_, any_ := props["anyOf"]
	if typ != "Question" {
		if one || any_ {
			return store.Errorf(store.EUNPROCESSABLE, "oneOf and anyOf belong to a Question, not a %s", typ)
		}
		return nil
	}
	if one == any_ {
		return store.Errorf(store.EUNPROCESSABLE, "a Question needs its options in oneOf or in anyOf (one of them)")
	}
	if _, ok := props["votersCount"]; ok {
		return store.Errorf(store.EUNPROCESSABLE, "votersCount is kept by the server and cannot be set")
	}
	key := "oneOf"
	if any_ {
		key = "anyOf"
	}
	l, ok := props[key].([]any)
	if !ok || len(l) < 1 || len(l) > 20 {
		return store.Errorf(store.EUNPROCESSABLE, "%s must be a list of 1 to 20 options", key)
	}
	names := map[string]bool{}
	opts := make([]any, len(l))
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return store.Errorf(store.EUNPROCESSABLE, "%s option %d must be an object with a name", key, i)
		}
		name, _ := m["name"].(string)
		if name == "" || utf8.RuneCountInString(name) > 200 {
			return store.Errorf(store.EUNPROCESSABLE, "%s option %d needs a name of 1 to 200 characters", key, i)
		}
		if names[name] {
			return store.Errorf(store.EUNPROCESSABLE, "%s option %q appears twice", key, name)
		}
		names[name] = true
		if _, ok := m["replies"]; ok {
			return store.Errorf(store.EUNPROCESSABLE, "%s option %q: replies (the votes) are kept by the server", key, name)
		}
		c := make(map[string]any, len(m)+1)
		for k, v := range m {
			c[k] = v
		}
		if _, ok := c["type"]; !ok {
			c["type"] = "Note"
		}
		opts[i] = c
	}
	props[key] = opts
	for _, k := range []string{"endTime", "closed"} {
		v, ok := props[k]
		if !ok || v == nil {
			continue
		}
		if b, isBool := v.(bool); isBool && k == "closed" {
			_ = b
			continue
		}
		t, isStr := v.(string)
		if !isStr {
			return store.Errorf(store.EUNPROCESSABLE, "%s must be a time (RFC 3339)", k)
		}
		if _, err := time.Parse(time.RFC3339, t); err != nil {
			return store.Errorf(store.EUNPROCESSABLE, "%s %q is not an RFC 3339 time", k, t)
		}
	}
	return nil
}

// voteShape reports whether obj is a vote: a Note with a name (the option)
// and an inReplyTo (the poll), without content as Mastodon sends it, or
// with content when what it replies to is a poll courier has. It returns
// the poll and the option.
func (s *Server) voteShape(r *http.Request, obj map[string]any) (question, option string, ok bool) {
	if t, _ := obj["type"].(string); t != "Note" {
		return "", "", false
	}
	name, _ := obj["name"].(string)
	question = objectID(rawOf(obj["inReplyTo"]))
	if name == "" || question == "" || obj["attachment"] != nil {
		return "", "", false
	}
	if obj["content"] == nil && obj["contentMap"] == nil {
		return question, name, true
	}
	o, err := s.st.ObjectByURI(r.Context(), question)
	return question, name, err == nil && o.Type == "Question"
}
