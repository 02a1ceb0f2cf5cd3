package metrics

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Label values reported when a caller's value cannot be used as is.
const (
	// LabelOther replaces a value past the cap of distinct values.
	LabelOther = "other"
	// LabelUnknown replaces an empty value.
	LabelUnknown = "unknown"
)

// maxLabelLen bounds one label value in bytes.
const maxLabelLen = 64

// labelGuard keeps one label's set of values bounded: the first max distinct
// values pass, later ones become LabelOther. Values are also made valid,
// short UTF-8, since client_golang panics on invalid UTF-8 label values and
// some values (event types read from the database) are not ours to trust.
type labelGuard struct {
	mu   sync.RWMutex
	seen map[string]struct{}
	max  int
}

func newLabelGuard(max int) *labelGuard {
	return &labelGuard{seen: make(map[string]struct{}), max: max}
}

func (g *labelGuard) value(v string) string {
	g.mu.RLock()
	_, ok := g.seen[v]
	g.mu.RUnlock()
	if ok {
		return v
	}
	clean := sanitize(v)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.seen[clean]; ok {
		return clean
	}
	if clean == LabelOther || clean == LabelUnknown {
		return clean // reserved values never use up the cap
	}
	if len(g.seen) >= g.max {
		return LabelOther
	}
	g.seen[clean] = struct{}{}
	return clean
}

func sanitize(v string) string {
	if v == "" {
		return LabelUnknown
	}
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if len(v) > maxLabelLen {
		cut := maxLabelLen
		for cut > 0 && !utf8.RuneStart(v[cut]) {
			cut--
		}
		v = v[:cut]
	}
	return v
}

// StatusClass maps an HTTP status code to the bounded label value used by
// courier_delivery_*: "1xx" to "5xx", or "none" when no response arrived
// (a code of 0: timeout, connection or DNS error) or the code is out of range.
func StatusClass(code int) string {
	switch {
	case code >= 100 && code < 200:
		return "1xx"
	case code >= 200 && code < 300:
		return "2xx"
	case code >= 300 && code < 400:
		return "3xx"
	case code >= 400 && code < 500:
		return "4xx"
	case code >= 500 && code < 600:
		return "5xx"
	}
	return "none"
}
