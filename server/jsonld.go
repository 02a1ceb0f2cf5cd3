package server

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/piprate/json-gold/ld"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// What an application writes cannot forge what the server vouches for.
// A client's object is read as a JSON-LD processor reads it: expanded with
// the @context it is served with (ActivityStreams, courier's terms, then
// the client's entries), offline, and the decision is taken on the
// expanded form, so a server-set property is refused under any spelling
// (its term, as:x, the full IRI, @id or @type, or a client term standing
// for it). checkLD is the one rule; docs/client-to-server.md states it.

// contextFiles are the JSON-LD contexts courier ships: the only ones it
// reads (it fetches none from the network).
//
//go:embed contexts/*.jsonld
var contextFiles embed.FS

// bundledContexts maps the URLs of the contexts courier ships to their
// files.
var bundledContexts = map[string]string{
	activitypub.ActivityStreams:            "contexts/activitystreams.jsonld",
	"http://www.w3.org/ns/activitystreams": "contexts/activitystreams.jsonld",
	activitypub.SecurityContext:            "contexts/security-v1.jsonld",
}

// Namespaces of the vocabularies whose properties and types the server
// decides: a name is protected in any of them (and in "_:", where
// ActivityStreams' @vocab puts a term no context defines).
var protectedNamespaces = []string{
	"https://www.w3.org/ns/activitystreams#", "http://www.w3.org/ns/activitystreams#",
	"https://w3id.org/security#", "http://w3id.org/security#",
	"http://www.w3.org/ns/ldp#", "http://joinmastodon.org/ns#", "_:",
}

// identityProperties make a document an actor or a key: refused anywhere
// in a client's object.
var identityProperties = []string{
	"inbox", "outbox", "followers", "following", "liked", "streams", "endpoints", "sharedInbox",
	"preferredUsername", "publicKey", "publicKeyPem", "owner", "controller", "assertionMethod",
	"authentication", "publicKeyMultibase", "featured", "featuredTags", "alsoKnownAs", "movedTo",
	"devices", "manuallyApprovesFollowers", "discoverable", "indexable", "suspended", "memorial",
}

// serverSetProperties are set by the server on the object itself: the
// object's author, times, audience and counts. The plain to and cc the
// client sends are read by the server and written anew; no other spelling
// of them is.
var serverSetProperties = []string{
	"attributedTo", "actor", "published", "updated", "to", "cc", "bto", "bcc", "audience",
	"likes", "shares", "replies", "votersCount", "deleted", "formerType",
}

// identityTypes are classes an object of a client is never, at any depth:
// actors, keys and tombstones.
var identityTypes = []string{
	"Person", "Service", "Application", "Group", "Organization",
	"Key", "CryptographicKey", "Multikey", "Tombstone",
}

// extraTerms are the usual meanings of protected names that no context
// courier ships defines: a client context may state them, not change them.
var extraTerms = map[string]string{
	"featured":                  "http://joinmastodon.org/ns#featured",
	"featuredTags":              "http://joinmastodon.org/ns#featuredTags",
	"discoverable":              "http://joinmastodon.org/ns#discoverable",
	"indexable":                 "http://joinmastodon.org/ns#indexable",
	"suspended":                 "http://joinmastodon.org/ns#suspended",
	"memorial":                  "http://joinmastodon.org/ns#memorial",
	"devices":                   "http://joinmastodon.org/ns#devices",
	"movedTo":                   "https://www.w3.org/ns/activitystreams#movedTo",
	"manuallyApprovesFollowers": "https://www.w3.org/ns/activitystreams#manuallyApprovesFollowers",
	"controller":                "https://w3id.org/security#controller",
	"assertionMethod":           "https://w3id.org/security#assertionMethod",
	"authentication":            "https://w3id.org/security#authenticationMethod",
	"publicKeyMultibase":        "https://w3id.org/security#publicKeyMultibase",
}

// offlineLoader serves the bundled contexts and refuses any other URL: no
// context is fetched.
type offlineLoader struct{}

// errNotBundled is a context URL courier does not ship.
type errNotBundled struct{ url string }

func (e *errNotBundled) Error() string { return "context " + e.url + " is not bundled" }

func (offlineLoader) LoadDocument(u string) (*ld.RemoteDocument, error) {
	doc, err := bundledContext(u)
	if err != nil {
		return nil, err
	}
	return &ld.RemoteDocument{DocumentURL: u, Document: doc}, nil
}

// bundledContext decodes the bundled context at u afresh (the processor
// may keep what it is given).
func bundledContext(u string) (any, error) {
	name, ok := bundledContexts[u]
	if !ok {
		return nil, &errNotBundled{url: u}
	}
	b, err := contextFiles.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

func ldOptions() *ld.JsonLdOptions {
	o := ld.NewJsonLdOptions("")
	o.DocumentLoader = offlineLoader{}
	o.ProcessingMode = ld.JsonLd_1_1
	o.SafeMode = true
	return o
}

// servedBase is the start of every object's context, parsed once:
// ActivityStreams and courier's terms (store.ObjectContext). Copied
// (ld.CopyContext) before a client's entries are parsed onto it.
var servedBase = sync.OnceValues(func() (*ld.Context, error) {
	return ld.NewContext(nil, ldOptions()).Parse(store.ObjectContext(nil))
})

// baseTerms are the term definitions of the vocabularies a client context
// may not change: ActivityStreams, security v1 and courier's own terms.
var baseTerms = sync.OnceValues(func() (map[string]*ld.TermDefinition, error) {
	c, err := ld.NewContext(nil, ldOptions()).Parse(append(store.ObjectContext(nil), any(activitypub.SecurityContext)))
	if err != nil {
		return nil, err
	}
	return c.TermDefinitions, nil
})

// checkLD applies the rule to a client's object: ctx is the client's
// @context entries (beyond ActivityStreams), typ its type and props its
// properties as they will be served (the server's own set over them
// afterwards: id, type, attributedTo, published, updated, to, cc). base is
// the server's origin. It returns a 422 naming what is refused, or nil.
func checkLD(base string, ctx []any, typ string, props map[string]any) (err error) {
	defer func() {
		// The processor is not trusted to never panic on what a client
		// sends; the fuzz target runs checkObjectLD without this guard.
		if p := recover(); p != nil {
			err = store.Errorf(store.EUNPROCESSABLE, "the object cannot be read as JSON-LD")
		}
	}()
	return checkObjectLD(base, ctx, typ, props)
}

// checkObjectLD is checkLD without its guard against a panic.
func checkObjectLD(base string, ctx []any, typ string, props map[string]any) error {
	if typ == "" {
		return store.Errorf(store.EUNPROCESSABLE, "the object has no type")
	}
	if err := checkClientContext(ctx, false); err != nil {
		return err
	}
	base0, err := servedBase()
	if err != nil {
		return store.Errorf(store.EUNPROCESSABLE, "bundled contexts: %v", err)
	}
	// The context the object is served with: ActivityStreams and
	// courier's terms (parsed once), then the client's entries.
	active := ld.CopyContext(base0)
	if len(ctx) > 0 {
		if active, err = active.Parse(ctx); err != nil {
			return contextError(err)
		}
	}
	if err := checkTerms(active, ctx); err != nil {
		return err
	}
	doc, err := plain(props)
	if err != nil {
		return err
	}
	if err := checkKeys(doc, ""); err != nil {
		return err
	}
	// The server writes to and cc anew from what it read; the rest is
	// served as sent.
	delete(doc, "to")
	delete(doc, "cc")
	doc["type"] = typ
	expanded, err := ld.NewJsonLdApi().Expand(active, "", doc, ldOptions(), false, nil)
	if err != nil {
		return expandError(err, active, doc)
	}
	node, ok := expanded.(map[string]any)
	if !ok {
		return store.Errorf(store.EUNPROCESSABLE, "the object must be one node")
	}
	c := &ldChecker{base: base, typ: typ, active: active, doc: doc}
	if err := c.top(node); err != nil {
		return err
	}
	return c.nested(node, 0)
}

// plain re-decodes props as generic JSON (numbers as float64, which the
// processor reads); nothing of it is served.
func plain(props map[string]any) (map[string]any, error) {
	b, err := json.Marshal(props)
	if err != nil {
		return nil, store.Errorf(store.EUNPROCESSABLE, "the object cannot be encoded: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, store.Errorf(store.EUNPROCESSABLE, "the object cannot be encoded")
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// checkClientContext checks the client's context entries before they are
// processed: a URL must be a context courier ships; an object of terms may
// not set @vocab, @base or @import nor give a term a context of its own
// (a scoped context, which would make each node cost a context). scoped
// is whether entries are inside a term definition.
func checkClientContext(entries []any, scoped bool) error {
	for _, e := range entries {
		switch x := e.(type) {
		case nil:
		case string:
			if _, ok := bundledContexts[x]; !ok {
				return store.Errorf(store.EUNPROCESSABLE,
					"@context %q is not a context this server ships (it reads none from the network): define its terms inline", x)
			}
		case map[string]any:
			for _, k := range sortedKeys(x) {
				switch k {
				case "@vocab", "@base", "@import", "@propagate":
					return store.Errorf(store.EUNPROCESSABLE, "@context may not set %s", k)
				}
				if def, ok := x[k].(map[string]any); ok {
					if _, ok := def["@context"]; ok {
						return store.Errorf(store.EUNPROCESSABLE, "@context: term %q has a context of its own; define every term at the top", k)
					}
				}
			}
		case []any:
			if err := checkClientContext(x, scoped); err != nil {
				return err
			}
		default:
			return store.Errorf(store.EUNPROCESSABLE, "@context entries must be URLs or objects")
		}
	}
	return nil
}

// checkTerms refuses a client term that changes a term of ActivityStreams,
// security v1 or courier's own (or a protected name's usual meaning), and
// a client term that stands for a keyword (@id, @type...).
func checkTerms(active *ld.Context, ctx []any) error {
	baseDefs, err := baseTerms()
	if err != nil {
		return store.Errorf(store.EUNPROCESSABLE, "bundled contexts: %v", err)
	}
	seen := map[string]bool{}
	var terms []string
	for _, e := range ctx {
		if m, ok := e.(map[string]any); ok {
			for k := range m {
				if !strings.HasPrefix(k, "@") && !seen[k] {
					seen[k] = true
					terms = append(terms, k)
				}
			}
		}
	}
	sort.Strings(terms)
	for _, t := range terms {
		def := active.TermDefinitions[t]
		want, reserved := "", false
		if b, ok := baseDefs[t]; ok && b != nil {
			want, reserved = b.ID, true
		} else if iri, ok := extraTerms[t]; ok {
			want, reserved = iri, true
		} else if slices.Contains(identityProperties, t) || slices.Contains(serverSetProperties, t) {
			reserved = true
		}
		switch {
		case reserved && (def == nil || canonical(def.ID) != canonical(want) || def.Reverse || def.Nest != ""):
			return store.Errorf(store.EUNPROCESSABLE,
				"@context redefines %q, a term of ActivityStreams, security or this server: a client context may add terms, not change them", t)
		case reserved:
		case def != nil && (ld.IsKeyword(def.ID) || def.Reverse || def.Nest != ""):
			return store.Errorf(store.EUNPROCESSABLE, "@context: term %q stands for %s; a client term may only name a property or a type", t, keywordOf(def))
		}
	}
	return nil
}

func keywordOf(def *ld.TermDefinition) string {
	switch {
	case def.Reverse:
		return "@reverse"
	case def.Nest != "":
		return "@nest"
	}
	return def.ID
}

// checkKeys refuses an @context below the top of the object (the object
// is read with one context) and a property without a name (which means
// nothing, and which the processor does not survive).
func checkKeys(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if k == "@context" && at != "" {
				return store.Errorf(store.EUNPROCESSABLE, "%s has an @context of its own; put every term in the object's @context", at)
			}
			if k == "" {
				return store.Errorf(store.EUNPROCESSABLE, "a property of the object has an empty name")
			}
			p := k
			if at != "" {
				p = at + "." + k
			}
			if err := checkKeys(x[k], p); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := checkKeys(e, at); err != nil {
				return err
			}
		}
	}
	return nil
}

// contextError reports a context the processor could not read.
func contextError(err error) error {
	var nb *errNotBundled
	if errors.As(err, &nb) {
		return store.Errorf(store.EUNPROCESSABLE,
			"@context %q is not a context this server ships (it reads none from the network): define its terms inline", nb.url)
	}
	return store.Errorf(store.EUNPROCESSABLE, "@context cannot be read: %s", ldMessage(err))
}

// expandError reports an object the processor could not expand, naming
// the property that means nothing in its context when it can.
func expandError(err error, active *ld.Context, doc map[string]any) error {
	var le *ld.JsonLdError
	if errors.As(err, &le) && le.Code == ld.InvalidProperty {
		for _, k := range sortedKeys(doc) {
			if k == "@context" {
				continue
			}
			iri, err := active.ExpandIri(k, false, true, nil, nil)
			if err != nil || iri == "" || (!strings.Contains(iri, ":") && !ld.IsKeyword(iri)) {
				return store.Errorf(store.EUNPROCESSABLE, "property %q means nothing in the object's @context", k)
			}
		}
		return store.Errorf(store.EUNPROCESSABLE, "a property of the object means nothing in its @context (a key beginning with @ that is no keyword?)")
	}
	return contextError(err)
}

func ldMessage(err error) string {
	var le *ld.JsonLdError
	if errors.As(err, &le) && le.Details == nil {
		return string(le.Code)
	}
	return err.Error()
}

// canonical writes an IRI of ActivityStreams or security with https.
func canonical(iri string) string {
	for _, ns := range []string{"http://www.w3.org/ns/activitystreams#", "http://w3id.org/security#"} {
		if rest, ok := strings.CutPrefix(iri, ns); ok {
			return "https" + strings.TrimPrefix(ns, "http") + rest
		}
	}
	return iri
}

// protectedName returns the local name of iri when it lies in one of the
// protected namespaces.
func protectedName(iri string) (string, bool) {
	for _, ns := range protectedNamespaces {
		if rest, ok := strings.CutPrefix(iri, ns); ok && rest != "" {
			return rest, true
		}
	}
	return "", false
}

// ldChecker walks the expanded object.
type ldChecker struct {
	base   string
	typ    string // the type as sent
	active *ld.Context
	doc    map[string]any // the object as expanded (generic JSON)
}

// spelling names the client's key for iri at the top of the object: the
// key as sent, and what it means when that is not its plain name.
func (c *ldChecker) spelling(iri string) string {
	name, _ := protectedName(iri)
	for _, k := range sortedKeys(c.doc) {
		if k == "@context" {
			continue
		}
		e, err := c.active.ExpandIri(k, false, true, nil, nil)
		if err != nil || canonical(e) != canonical(iri) {
			continue
		}
		if k == name {
			return fmt.Sprintf("%q", k)
		}
		return fmt.Sprintf("%q (%s)", k, short(iri))
	}
	return short(iri)
}

// short writes iri with the as:, sec: or ldp: prefix.
func short(iri string) string {
	iri = canonical(iri)
	for p, ns := range map[string]string{"as:": "https://www.w3.org/ns/activitystreams#",
		"sec:": "https://w3id.org/security#", "ldp:": "http://www.w3.org/ns/ldp#", "toot:": "http://joinmastodon.org/ns#"} {
		if rest, ok := strings.CutPrefix(iri, ns); ok {
			return p + rest
		}
	}
	return strings.TrimPrefix(iri, "_:")
}

// top checks the object's own node: no id of the client's, one type that
// is no actor, key, collection, tombstone or activity, and no property the
// server sets.
func (c *ldChecker) top(node map[string]any) error {
	if _, ok := node["@id"]; ok {
		return store.Errorf(store.EUNPROCESSABLE, "%s is set by the server: a client's object has no id of its own", c.keywordSpelling("@id"))
	}
	types, _ := node["@type"].([]any)
	if len(types) != 1 {
		return store.Errorf(store.EUNPROCESSABLE, "the object has one type, given as type; %s gives it another", c.keywordSpelling("@type"))
	}
	t, _ := types[0].(string)
	if name, ok := protectedName(t); ok && (refusedTypes[name] || activityTypes[name] || slices.Contains(identityTypes, name)) {
		return store.Errorf(store.EUNPROCESSABLE, "type %q (%s): a %s cannot be published as an object", c.typ, short(t), name)
	}
	for _, k := range sortedKeys(node) {
		switch k {
		case "@id", "@type":
			continue
		case "@reverse", "@graph", "@included":
			return store.Errorf(store.EUNPROCESSABLE, "%s is not carried", c.keywordSpelling(k))
		}
		if name, ok := protectedName(k); ok && slices.Contains(serverSetProperties, name) {
			return store.Errorf(store.EUNPROCESSABLE, "%s is set by the server and cannot be sent", c.spelling(k))
		}
	}
	return nil
}

// keywordSpelling names the client's key that stands for keyword kw.
func (c *ldChecker) keywordSpelling(kw string) string {
	for _, k := range sortedKeys(c.doc) {
		if k == kw {
			return fmt.Sprintf("%q", k)
		}
		if e, err := c.active.ExpandIri(k, false, true, nil, nil); err == nil && e == kw && k != "type" {
			return fmt.Sprintf("%q (%s)", k, kw)
		}
	}
	return kw
}

// maxDepth bounds the walk of the expanded object (Go's decoder already
// bounds the nesting of what was sent).
const maxDepth = 10000

// nested checks every node of the object, its own included: no property
// that makes an actor or a key, no actor, key or tombstone type, and no
// embedded object under the server's origin (a reference by id alone is
// fine).
func (c *ldChecker) nested(v any, depth int) error {
	if depth > maxDepth {
		return store.Errorf(store.EUNPROCESSABLE, "the object is nested too deeply")
	}
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if err := c.nested(e, depth+1); err != nil {
				return err
			}
		}
	case map[string]any:
		if _, isValue := x["@value"]; isValue {
			return nil
		}
		for _, k := range sortedKeys(x) {
			switch k {
			case "@reverse", "@graph", "@included":
				return store.Errorf(store.EUNPROCESSABLE, "%s is not carried", k)
			case "@type":
				for _, t := range list(x[k]) {
					s, _ := t.(string)
					if name, ok := protectedName(s); ok && slices.Contains(identityTypes, name) {
						return store.Errorf(store.EUNPROCESSABLE, "an embedded %s (type %s) cannot be published: actors and keys are the server's", name, short(s))
					}
				}
				continue
			case "@id":
				if id, _ := x[k].(string); depth > 0 && len(x) > 1 && idUnder(c.base, id) {
					return store.Errorf(store.EUNPROCESSABLE, "an embedded object with id %q: objects of this server are served by it, not embedded by a client", id)
				}
				continue
			}
			if name, ok := protectedName(k); ok && slices.Contains(identityProperties, name) {
				where := "the object"
				if depth > 0 {
					where = "an embedded object"
				}
				return store.Errorf(store.EUNPROCESSABLE, "%s of %s makes an actor or a key: it is the server's to set", c.spelling(k), where)
			}
			if err := c.nested(x[k], depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// idUnder reports whether id names a document of the server at base.
func idUnder(base, id string) bool {
	return base != "" && (id == base || strings.HasPrefix(id, base+"/") || strings.HasPrefix(id, base+"#"))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
