package activitypub

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The subset of RFC 8941 Structured Field Values that RFC 9421 needs: a
// dictionary whose members are inner lists or items, with parameters. The
// bare item types are string, integer, token, byte sequence and boolean
// (decimals are refused: no signature field uses them).

var errSFV = errors.New("structured field")

// sfToken is a token bare item, told apart from a string.
type sfToken string

// sfParam is one parameter of an item or inner list.
type sfParam struct {
	key   string
	value any // string, int64, sfToken, []byte or bool
}

// sfItem is a bare item and its parameters.
type sfItem struct {
	value  any
	params []sfParam
}

// sfMember is a dictionary member: an inner list (inner != nil or list) or
// an item, and the member's parameters.
type sfMember struct {
	key    string
	list   bool
	inner  []sfItem
	item   sfItem
	params []sfParam
}

// maxSFMembers bounds a parsed dictionary and each inner list.
const maxSFMembers = 64

// parseSFDictionary parses a dictionary field value.
func parseSFDictionary(s string) ([]sfMember, error) {
	p := sfParser{s: s}
	p.skipSP()
	var out []sfMember
	for !p.done() {
		if len(out) == maxSFMembers {
			return nil, fmt.Errorf("%w: more than %d members", errSFV, maxSFMembers)
		}
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		m := sfMember{key: key}
		if p.peek() == '=' {
			p.i++
			if p.peek() == '(' {
				m.list = true
				if m.inner, err = p.innerList(); err != nil {
					return nil, err
				}
			} else if m.item.value, err = p.bareItem(); err != nil {
				return nil, err
			}
		} else {
			m.item.value = true
		}
		if m.params, err = p.parameters(); err != nil {
			return nil, err
		}
		if !m.list {
			m.item.params = m.params
		}
		// A later member of the same name replaces the earlier one.
		replaced := false
		for k := range out {
			if out[k].key == key {
				out[k], replaced = m, true
			}
		}
		if !replaced {
			out = append(out, m)
		}
		p.skipOWS()
		if p.done() {
			break
		}
		if p.peek() != ',' {
			return nil, fmt.Errorf("%w: expected a comma at %d", errSFV, p.i)
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, fmt.Errorf("%w: trailing comma", errSFV)
		}
	}
	return out, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) skipSP() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z') && c != '*' {
		return "", fmt.Errorf("%w: bad key at %d", errSFV, p.i)
	}
	for !p.done() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) innerList() ([]sfItem, error) {
	p.i++ // (
	var items []sfItem
	for {
		p.skipSP()
		if p.done() {
			return nil, fmt.Errorf("%w: unterminated inner list", errSFV)
		}
		if p.peek() == ')' {
			p.i++
			return items, nil
		}
		if len(items) == maxSFMembers {
			return nil, fmt.Errorf("%w: more than %d items in an inner list", errSFV, maxSFMembers)
		}
		v, err := p.bareItem()
		if err != nil {
			return nil, err
		}
		params, err := p.parameters()
		if err != nil {
			return nil, err
		}
		items = append(items, sfItem{value: v, params: params})
		if c := p.peek(); c != ' ' && c != ')' {
			return nil, fmt.Errorf("%w: bad inner list at %d", errSFV, p.i)
		}
	}
}

func (p *sfParser) parameters() ([]sfParam, error) {
	var out []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for k := range out {
			if out[k].key == key {
				out[k].value, replaced = v, true
			}
		}
		if !replaced {
			if len(out) == maxSFMembers {
				return nil, fmt.Errorf("%w: more than %d parameters", errSFV, maxSFMembers)
			}
			out = append(out, sfParam{key: key, value: v})
		}
	}
	return out, nil
}

func (p *sfParser) bareItem() (any, error) {
	c := p.peek()
	switch {
	case c == '"':
		return p.str()
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, fmt.Errorf("%w: bad boolean at %d", errSFV, p.i)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.integer()
	case (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '*':
		start := p.i
		for !p.done() && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, fmt.Errorf("%w: bad item at %d", errSFV, p.i)
}

func isTokenChar(c byte) bool {
	if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

func (p *sfParser) str() (string, error) {
	p.i++ // "
	var b strings.Builder
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in a string", errSFV)
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: bad character in a string", errSFV)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: unterminated string", errSFV)
}

func (p *sfParser) bytes() ([]byte, error) {
	p.i++ // :
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, fmt.Errorf("%w: unterminated byte sequence", errSFV)
	}
	raw := p.s[p.i : p.i+end]
	p.i += end + 1
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: byte sequence: %v", errSFV, err)
	}
	return b, nil
}

func (p *sfParser) integer() (int64, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits := p.i
	for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || p.i-digits > 15 {
		return 0, fmt.Errorf("%w: bad integer at %d", errSFV, start)
	}
	if p.peek() == '.' {
		return 0, fmt.Errorf("%w: decimals are not supported", errSFV)
	}
	n, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errSFV, err)
	}
	return n, nil
}

// serializeSFInnerList writes items and params in the canonical form of
// RFC 8941 section 4.1.1.1.
func serializeSFInnerList(b *strings.Builder, items []sfItem, params []sfParam) {
	b.WriteByte('(')
	for k, it := range items {
		if k > 0 {
			b.WriteByte(' ')
		}
		serializeSFBare(b, it.value)
		serializeSFParams(b, it.params)
	}
	b.WriteByte(')')
	serializeSFParams(b, params)
}

func serializeSFParams(b *strings.Builder, params []sfParam) {
	for _, p := range params {
		b.WriteByte(';')
		b.WriteString(p.key)
		if v, ok := p.value.(bool); ok && v {
			continue
		}
		b.WriteByte('=')
		serializeSFBare(b, p.value)
	}
}

func serializeSFBare(b *strings.Builder, v any) {
	switch v := v.(type) {
	case string:
		b.WriteByte('"')
		for k := 0; k < len(v); k++ {
			if v[k] == '"' || v[k] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[k])
		}
		b.WriteByte('"')
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case sfToken:
		b.WriteString(string(v))
	case []byte:
		b.WriteByte(':')
		b.WriteString(base64.StdEncoding.EncodeToString(v))
		b.WriteByte(':')
	case bool:
		if v {
			b.WriteString("?1")
		} else {
			b.WriteString("?0")
		}
	}
}
