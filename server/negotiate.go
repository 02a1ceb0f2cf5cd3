package server

import (
	"mime"
	"strconv"
	"strings"

	"github.com/courier-ap/courier/activitypub"
)

// representation is what a GET answers with.
type representation int

const (
	reprJSON representation = iota // application/activity+json
	reprLD                         // application/ld+json; profile=ActivityStreams
	reprHTML                       // text/html
)

// negotiate picks the representation for an Accept header. An ActivityPub
// type gets JSON in that type (ld+json only when activity+json is not
// listed); a browser (text/html without an ActivityPub type) gets HTML;
// anything else, no header included, gets application/activity+json.
func negotiate(accept string) representation {
	if activitypub.Accepts(accept) {
		if !strings.Contains(strings.ToLower(accept), "application/activity+json") {
			return reprLD
		}
		return reprJSON
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || (mt != "text/html" && mt != "application/xhtml+xml") {
			continue
		}
		if q, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(q, 64); err != nil || f <= 0 {
				continue
			}
		}
		return reprHTML
	}
	return reprJSON
}

func (r representation) contentType() string {
	switch r {
	case reprLD:
		return activitypub.LDContentType
	case reprHTML:
		return "text/html; charset=utf-8"
	default:
		return activitypub.ContentType
	}
}

// acceptedBody reports whether a C2S request's Content-Type is one courier
// reads: the two ActivityPub types and, for the convenience of clients such
// as curl scripts, plain application/json.
func acceptedBody(ct string) bool {
	if activitypub.IsActivityPubContentType(ct) {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
