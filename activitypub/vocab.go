package activitypub

import (
	"mime"
	"slices"
	"strconv"
	"strings"
)

// contentTypes are the ActivityStreams types of content objects: what
// courier publishes for a client (package server) and stores when another
// server sends it (package inbox), decided here once so that what one
// courier publishes another stores.
var contentTypes = []string{"Note", "Article", "Page", "Question", "Event", "Image", "Video", "Audio", "Document", "Place"}

// IsContentType reports whether t is the type of a content object (a Note,
// an Article, a Question...), as courier publishes and stores them.
func IsContentType(t string) bool { return slices.Contains(contentTypes, t) }

// Public is the special collection addressing an activity to everyone.
const Public = "https://www.w3.org/ns/activitystreams#Public"

// IsPublic reports whether v names the public collection: Public, or its
// compact forms "as:Public" and "Public".
func IsPublic(v string) bool {
	return v == Public || v == "as:Public" || v == "Public"
}

// ActivityStreams is the ActivityStreams JSON-LD context and profile URI.
const ActivityStreams = "https://www.w3.org/ns/activitystreams"

// EventStreamTerm defines, inline, the eventStream property of the SWICG
// draft "Server-Sent Events for the ActivityPub API" (the stream of an
// inbox or outbox collection). The draft's namespace serves no context
// document a JSON-LD processor can read, and one that tries to fetch it
// (Fedify does) fails on the whole collection, so documents carry the
// term's definition rather than the namespace's URL.
var EventStreamTerm = map[string]any{
	"eventStream": map[string]string{"@id": "https://purl.archive.org/socialweb/sse#eventStream", "@type": "@id"},
}

// SecurityContext is the JSON-LD context that defines publicKey.
const SecurityContext = "https://w3id.org/security/v1"

// Content types of ActivityPub documents.
const (
	// ContentType is the media type courier serves and sends.
	ContentType = "application/activity+json"
	// LDContentType is the equivalent JSON-LD form with the ActivityStreams profile.
	LDContentType = `application/ld+json; profile="https://www.w3.org/ns/activitystreams"`
	// AcceptHeader is the Accept value courier sends when fetching documents.
	AcceptHeader = ContentType + ", " + LDContentType
)

// IsActivityPubContentType reports whether ct (a Content-Type header value)
// names an ActivityPub document: application/activity+json (any parameters),
// or application/ld+json whose profile parameter lists the ActivityStreams
// URI. Case, whitespace and parameter order do not matter.
func IsActivityPubContentType(ct string) bool {
	if ct == ContentType || ct == LDContentType {
		return true // what peers send, without parsing
	}
	mt, params, ok := parseMediaType(ct)
	if !ok {
		return false
	}
	switch mt {
	case "application/activity+json":
		return true
	case "application/ld+json":
		return hasASProfile(params["profile"])
	}
	return false
}

// hasASProfile reports whether a profile parameter (a space-separated URI
// list) contains the ActivityStreams URI.
func hasASProfile(profile string) bool {
	for _, p := range strings.Fields(profile) {
		if strings.TrimSuffix(p, "#") == ActivityStreams {
			return true
		}
	}
	return false
}

// Accepts reports whether an Accept header asks for an ActivityPub
// representation: it lists application/activity+json, or application/ld+json
// (with the ActivityStreams profile or none), with a non-zero quality. Wildcards
// alone do not count, so a browser's "text/html, */*" gets the HTML page.
func Accepts(acceptHeader string) bool {
	for _, part := range splitCommaOutsideQuotes(acceptHeader) {
		mt, params, ok := parseMediaType(part)
		if !ok {
			continue
		}
		if q, ok := params["q"]; ok {
			f, err := strconv.ParseFloat(q, 64)
			if err != nil || f <= 0 {
				continue
			}
		}
		switch mt {
		case "application/activity+json":
			return true
		case "application/ld+json":
			if p, ok := params["profile"]; !ok || hasASProfile(p) {
				return true
			}
		}
	}
	return false
}

// splitCommaOutsideQuotes splits s at commas that are not inside a quoted
// string (a profile parameter may be quoted and, in theory, hold a comma).
func splitCommaOutsideQuotes(s string) []string {
	var parts []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			inQuote = !inQuote
		case '\\':
			if inQuote {
				i++
			}
		case ',':
			if !inQuote {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// parseMediaType parses a media type with parameters like
// mime.ParseMediaType, falling back to a lenient split for values real peers
// send that RFC 7231 does not allow (an unquoted profile URL). Type and
// parameter names are lower-cased.
func parseMediaType(v string) (string, map[string]string, bool) {
	if mt, params, err := mime.ParseMediaType(v); err == nil {
		return mt, params, true
	}
	parts := splitSemicolonOutsideQuotes(v)
	mt := strings.ToLower(strings.TrimSpace(parts[0]))
	if mt == "" || strings.Count(mt, "/") != 1 || strings.ContainsAny(mt, " \t\"") {
		return "", nil, false
	}
	params := map[string]string{}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(p, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return "", nil, false
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		params[k] = val
	}
	return mt, params, true
}

func splitSemicolonOutsideQuotes(s string) []string {
	var parts []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			inQuote = !inQuote
		case ';':
			if !inQuote {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}
