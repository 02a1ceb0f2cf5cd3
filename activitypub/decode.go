package activitypub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file decodes activities and objects without decoding the document
// again and again into intermediate json.RawMessage values: encoding/json
// validates it (json.Valid), one walk over the valid top-level object keeps
// the raw value of each property courier reads, and the reducers below turn
// those values into strings and ids by walking them in place.
//
// The result is the one encoding/json would give with the loose shapes of
// the reference decoder's wire (reference_test.go): the documents accepted
// are those json.Valid accepts, which are those json.Unmarshal accepts;
// property names match as encoding/json matches them to struct fields
// (exactly, else case-insensitively with Unicode simple folding), the last
// of repeated properties wins, and strings are unquoted as encoding/json
// unquotes them.
// reference_test.go keeps the decoder this one replaced (json.Unmarshal
// into json.RawMessage properties, then each property again); the
// differential tests and fuzz targets of decode_test.go hold the two to the
// same results.

// maxDepth is encoding/json's nesting limit: json.Valid refuses deeper documents.
const maxDepth = 10000

// props holds the raw values (nil: absent) of the properties of an activity,
// an object or a tag.
type props [nProps][]byte

// Property indexes in props, in the order of propNames.
const (
	pID = iota
	pType
	pActor
	pObject
	pTarget
	pAttributedTo
	pTo
	pCc
	pBto
	pBcc
	pAudience
	pPublished
	pUpdated
	pName
	pSummary
	pContent
	pMediaType
	pURL
	pInReplyTo
	pSensitive
	pTag
	pHref
	pProof
	pSignature
	nProps
)

// propNames are the property names of the props indexes.
var propNames = [nProps]string{
	pID: "id", pType: "type", pActor: "actor", pObject: "object", pTarget: "target",
	pAttributedTo: "attributedTo", pTo: "to", pCc: "cc", pBto: "bto", pBcc: "bcc", pAudience: "audience",
	pPublished: "published", pUpdated: "updated", pName: "name", pSummary: "summary", pContent: "content",
	pMediaType: "mediaType", pURL: "url", pInReplyTo: "inReplyTo", pSensitive: "sensitive", pTag: "tag",
	pHref: "href", pProof: "proof", pSignature: "signature",
}

// propIndex returns the props index of the (still quoted) property name
// key, or -1.
func propIndex(key []byte) int {
	name := key[1 : len(key)-1]
	if plainString(name) {
		// ASCII: folding keeps the length.
		folded := -1
		for i, p := range propNames {
			if len(p) != len(name) {
				continue
			}
			if string(name) == p {
				return i
			}
			if folded < 0 && foldEqual(name, p) {
				folded = i
			}
		}
		return folded
	}
	if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
		name = []byte(unquote(key))
	}
	for i, p := range propNames {
		if foldEqual(name, p) {
			return i
		}
	}
	return -1
}

// foldEqual reports whether name equals the ASCII property name p under
// encoding/json's folding of field names: ASCII letters without case, and
// other runes replaced by the smallest rune of their simple case-folding
// orbit (so the Kelvin sign matches k, and the long s matches s).
func foldEqual(name []byte, p string) bool {
	j := 0
	for i := 0; i < len(name); {
		var r rune
		if c := name[i]; c < utf8.RuneSelf {
			r = rune(upperASCII(c))
			i++
		} else {
			var n int
			r, n = utf8.DecodeRune(name[i:])
			r = foldRune(r)
			i += n
		}
		if j >= len(p) || r != rune(upperASCII(p[j])) {
			return false
		}
		j++
	}
	return j == len(p)
}

func upperASCII(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// foldRune returns the smallest rune of r's simple case-folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// decodeProps validates data (an object, surrounding whitespace trimmed as
// bytes.TrimSpace trims it) as json.Unmarshal would and returns a copy of
// the trimmed document and the raw values of its properties, which are
// slices of that copy. Errors wrap ErrMalformed with encoding/json's
// message.
func decodeProps(data []byte) (props, []byte, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return props{}, nil, fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	// encoding/json validates (its scanner, nesting limit included); the
	// walkers below only read what it accepted.
	if !json.Valid(data) {
		// Ask encoding/json for the message (a syntax error is found before
		// anything is decoded, so the target does not matter).
		var v struct{}
		if err := json.Unmarshal(data, &v); err != nil {
			return props{}, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		return props{}, nil, fmt.Errorf("%w: invalid JSON", ErrMalformed)
	}
	data = bytes.Clone(data)
	return objectProps(data), data, nil
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// The walkers and reducers below read values json.Valid has accepted.

// skipValid returns the index just past the valid value starting at v[i].
func skipValid(v []byte, i int) int {
	switch v[i] {
	case '"':
		return skipString(v, i)
	case '{', '[':
		depth := 0
		for ; i < len(v); i++ {
			switch v[i] {
			case '"':
				i = skipString(v, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(v)
	}
	for i < len(v) {
		switch v[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipString returns the index just past the valid string at v[i].
func skipString(v []byte, i int) int {
	for i++; i < len(v); {
		q := bytes.IndexByte(v[i:], '"')
		if q < 0 {
			return len(v)
		}
		i += q
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for j := i - 1; j >= 0 && v[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
	return len(v)
}

// elements calls fn with each element of the valid array v, until fn
// returns false.
func elements(v []byte, fn func(elem []byte) bool) {
	i := skipSpace(v, 1)
	for i < len(v) && v[i] != ']' {
		end := skipValid(v, i)
		if !fn(v[i:end]) {
			return
		}
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
}

// members calls fn with the quoted name and the value of each member of
// the valid object v.
func members(v []byte, fn func(key, val []byte)) {
	i := skipSpace(v, 1)
	for i < len(v) && v[i] == '"' {
		kEnd := skipString(v, i)
		key := v[i:kEnd]
		start := skipSpace(v, skipSpace(v, kEnd)+1) // past the colon
		end := skipValid(v, start)
		fn(key, v[start:end])
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
}

// objectProps returns the raw values of the properties of the valid
// object v, slices of v capped at their length.
func objectProps(v []byte) props {
	var p props
	members(v, func(key, val []byte) {
		if idx := propIndex(key); idx >= 0 {
			p[idx] = val[:len(val):len(val)]
		}
	})
	return p
}

// plainString reports whether s holds only printable ASCII other than the
// quote and the backslash: the bytes of a string literal that unquotes to
// itself.
func plainString(s []byte) bool {
	for _, c := range s {
		if c >= utf8.RuneSelf || c < 0x20 || c == '\\' || c == '"' {
			return false
		}
	}
	return true
}

// unquote returns the content of the valid string literal v as
// encoding/json decodes it: escapes resolved, a \u escape of half a
// surrogate pair and each byte of invalid UTF-8 replaced by U+FFFD.
func unquote(v []byte) string {
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body)
	}
	b := make([]byte, 0, len(body)+utf8.UTFMax)
	for r := 0; r < len(body); {
		c := body[r]
		switch {
		case c == '\\':
			r++
			switch e := body[r]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(body[r+1:])
				r += 4
				if utf16.IsSurrogate(rr) {
					dec := unicode.ReplacementChar
					if r+6 < len(body) && body[r+1] == '\\' && body[r+2] == 'u' {
						dec = utf16.DecodeRune(rr, hex4(body[r+3:]))
					}
					if dec != unicode.ReplacementChar {
						r += 6
					}
					rr = dec
				}
				b = utf8.AppendRune(b, rr)
			default: // '"', '\\', '/'
				b = append(b, e)
			}
			r++
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(body[r:])
			b = utf8.AppendRune(b, rr)
			r += size
		}
	}
	return string(b)
}

// hex4 reads the four hex digits at the start of b (validated).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// vString reads a string value; anything else gives "".
func vString(v []byte) string {
	if len(v) == 0 || v[0] != '"' {
		return ""
	}
	return unquote(v)
}

// vFirstString reads a string, or the first non-empty string of a list.
func vFirstString(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '"':
		return unquote(v)
	case '[':
		var s string
		elements(v, func(e []byte) bool {
			s = vString(e)
			return s == ""
		})
		return s
	}
	return ""
}

// vSingleID reads a string, or the id (else href) of an object.
func vSingleID(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '"':
		return unquote(v)
	case '{':
		var id, href []byte
		members(v, func(key, val []byte) {
			switch propIndex(key) {
			case pID:
				id = val
			case pHref:
				href = val
			}
		})
		if s := vFirstString(id); s != "" {
			return s
		}
		return vFirstString(href)
	}
	return ""
}

// vFirstID returns the first id of a reference property, or "".
func vFirstID(v []byte) string {
	if len(v) == 0 || v[0] != '[' {
		return vSingleID(v)
	}
	var id string
	elements(v, func(e []byte) bool {
		id = vSingleID(e)
		return id == ""
	})
	return id
}

// vIDs returns the ids of a reference property (see IDs).
func vIDs(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	switch v[0] {
	case '"', '{':
		if id := vSingleID(v); id != "" {
			return []string{id}
		}
	case '[':
		var out []string
		elements(v, func(e []byte) bool {
			if id := vSingleID(e); id != "" {
				out = append(out, id)
			}
			return true
		})
		return out
	}
	return nil
}

// vStringOrMap reads a string, or a natural-language map ({"en": "..."})
// choosing "und", "en" or else the lexically first language (the empty
// language tag only when it is the only one). A map with a value that is
// not a string (or null) gives "".
func vStringOrMap(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		return unquote(v)
	}
	if v[0] != '{' {
		return ""
	}
	var (
		und, en, first, empty       string
		hasUnd, hasEn, hasFirst, ok = false, false, false, true
		firstKey                    string
		hasEmpty                    bool
	)
	members(v, func(key, val []byte) {
		var s string
		switch val[0] {
		case '"':
			s = unquote(val)
		case 'n':
		default:
			ok = false
			return
		}
		k := key[1 : len(key)-1]
		if !plainString(k) {
			k = []byte(unquote(key))
		}
		switch {
		case string(k) == "und":
			und, hasUnd = s, true
		case string(k) == "en":
			en, hasEn = s, true
		}
		switch {
		case len(k) == 0:
			empty, hasEmpty = s, true
		case !hasFirst || string(k) < firstKey:
			firstKey, first, hasFirst = string(k), s, true
		case string(k) == firstKey:
			first = s
		}
	})
	switch {
	case !ok:
		return ""
	case hasUnd:
		return und
	case hasEn:
		return en
	case hasFirst:
		return first
	case hasEmpty:
		return empty
	}
	return ""
}

// vTime reads an xsd:dateTime string; anything else gives the zero time.
func vTime(v []byte) time.Time {
	return parseTimeString(vFirstString(v))
}

// vTags reads a tag property: one tag object or a list of them.
func vTags(v []byte) []Tag {
	if len(v) == 0 {
		return nil
	}
	var out []Tag
	add := func(e []byte) bool {
		if e[0] != '{' {
			return true
		}
		p := objectProps(e)
		t := Tag{Type: vFirstString(p[pType]), Name: vStringOrMap(p[pName]), Href: vFirstID(p[pURL])}
		if h := vFirstString(p[pHref]); h != "" {
			t.Href = h
		}
		if t.Href == "" {
			t.Href = vFirstString(p[pID])
		}
		out = append(out, t)
		return true
	}
	switch v[0] {
	case '{':
		add(v)
	case '[':
		elements(v, add)
	}
	return out
}

// validRaw returns raw without surrounding whitespace, and whether it is
// one valid JSON value, for the reducers of json.RawMessage properties.
func validRaw(raw json.RawMessage) ([]byte, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	return raw, json.Valid(raw)
}
