package postgres

import (
	"strconv"
	"strings"
)

// Rebind numbers the ? placeholders of query for PostgreSQL ($1, $2, ...),
// leaving alone every ? inside quoted text, quoted identifiers, dollar-quoted
// bodies and comments. A query without ? is returned as it is, so statements
// written for PostgreSQL alone ($1 already) pass through unchanged.
func Rebind(query string) string {
	if strings.IndexByte(query, '?') < 0 {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			j := quotedEnd(query, i, c)
			b.WriteString(query[i:j])
			i = j
		case c == '-' && i+1 < len(query) && query[i+1] == '-':
			j := strings.IndexByte(query[i:], '\n')
			if j < 0 {
				j = len(query) - i
			}
			b.WriteString(query[i : i+j])
			i += j
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			j := strings.Index(query[i+2:], "*/")
			end := len(query)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			b.WriteString(query[i:end])
			i = end
		case c == '$':
			if tag, ok := dollarTag(query[i:]); ok {
				j := strings.Index(query[i+len(tag):], tag)
				end := len(query)
				if j >= 0 {
					end = i + len(tag) + j + len(tag)
				}
				b.WriteString(query[i:end])
				i = end
				continue
			}
			b.WriteByte(c)
			i++
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// quotedEnd returns the index just past the quoted run that starts at i with
// q, where a doubled q is an escaped q.
func quotedEnd(s string, i int, q byte) int {
	for j := i + 1; j < len(s); j++ {
		if s[j] == q {
			if j+1 < len(s) && s[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(s)
}

// dollarTag returns the opening tag of a dollar-quoted string ($$ or
// $name$) at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		if c == '$' {
			return s[:j+1], true
		}
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 1 && c >= '0' && c <= '9') {
			return "", false
		}
	}
	return "", false
}
