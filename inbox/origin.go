package inbox

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/courier-ap/courier/activitypub"
)

// actorTypes are the ActivityStreams actor types: an Update whose object is
// one of these updates the actor itself.
var actorTypes = map[string]bool{
	"Person": true, "Service": true, "Group": true, "Application": true, "Organization": true,
}

// urls parses the URLs of one request, each once: the acceptance path asks
// for the origin or host of the same few (the activity's id, its actor, the
// key id, the object's id) several times. The zero value is ready to use;
// it remembers up to maxURLs URLs and parses any other every time.
type urls struct {
	n int
	e [maxURLs]parsedURL
}

const maxURLs = 4

// parsedURL is what the acceptance path reads of a URL, as url.Parse
// reads it.
type parsedURL struct {
	raw    string
	host   string    // the authority without user information, as written; "" when url.Parse refuses raw
	origin urlOrigin // zero when raw has none
}

// urlOrigin is the scheme and lower-cased host (with port) of an absolute
// http(s) URL; two URLs have the same origin when these are equal.
type urlOrigin struct {
	scheme, host string
}

// get returns the entry of raw, parsing raw if it is not remembered.
func (c *urls) get(raw string) *parsedURL {
	for i := range c.n {
		if c.e[i].raw == raw {
			return &c.e[i]
		}
	}
	var e *parsedURL
	if c.n < maxURLs {
		c.e[c.n] = parsedURL{raw: raw}
		e = &c.e[c.n]
		c.n++
	} else {
		e = &parsedURL{raw: raw}
	}
	if u, err := url.Parse(raw); err == nil {
		e.host = u.Host
		if (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil {
			e.origin = urlOrigin{scheme: u.Scheme, host: strings.ToLower(u.Host)}
		}
	}
	return e
}

// origin returns the origin of an absolute http(s) URL, and false for
// anything else.
func (c *urls) origin(raw string) (urlOrigin, bool) {
	e := c.get(raw)
	return e.origin, e.origin.host != ""
}

// hostOf returns the lower-cased host name (without port) of a URL, or "".
func (c *urls) hostOf(raw string) string {
	u := url.URL{Host: c.get(raw).host}
	return strings.ToLower(u.Hostname())
}

// authority returns the lower-cased host of a URL with its port, if any,
// as delivery keys hosts, or "".
func (c *urls) authority(raw string) string {
	return strings.ToLower(c.get(raw).host)
}

// checkURLs checks that the activity's id and actor are absolute http(s)
// URLs.
func checkURLs(c *urls, a *activitypub.Activity) error {
	if _, ok := c.origin(a.ID); !ok {
		return fmt.Errorf("%w: id %q", ErrBadURL, a.ID)
	}
	if _, ok := c.origin(a.Actor); !ok {
		return fmt.Errorf("%w: actor %q", ErrBadURL, a.Actor)
	}
	return nil
}

// checkOrigin checks that the (verified) actor may speak for what the
// activity claims: the activity id is on the actor's origin; a Create or
// Update carries an object of the actor's origin attributed to the actor (or
// is the actor itself); a Delete deletes something of the actor's origin; an
// Undo undoes one of the actor's own activities. Other types name objects of
// anyone (a Like of a local note) and need no check here.
func checkOrigin(c *urls, a *activitypub.Activity) error {
	own, _ := c.origin(a.Actor)
	same := func(id string) bool {
		o, ok := c.origin(id)
		return ok && o == own
	}
	if !same(a.ID) {
		return fmt.Errorf("%w: activity %s is not on the actor's host", ErrOrigin, a.ID)
	}
	switch a.Type {
	case "Create", "Update":
		if a.Object == nil {
			if a.ObjectID == "" {
				return fmt.Errorf("%w: %s without an object", activitypub.ErrMalformed, a.Type)
			}
			if !same(a.ObjectID) {
				return fmt.Errorf("%w: object %s is not on the actor's host", ErrOrigin, a.ObjectID)
			}
			return nil
		}
		o := a.Object
		if o.ID == "" || !same(o.ID) {
			return fmt.Errorf("%w: object %q is not on the actor's host", ErrOrigin, o.ID)
		}
		if actorTypes[o.Type] {
			if o.ID != a.Actor {
				return fmt.Errorf("%w: %s of another actor %s", ErrOrigin, a.Type, o.ID)
			}
			return nil
		}
		if !slices.Contains(o.AttributedTo, a.Actor) {
			return fmt.Errorf("%w: object %s is not attributed to the actor", ErrOrigin, o.ID)
		}
	case "Delete":
		if a.ObjectID == "" {
			return fmt.Errorf("%w: Delete without an object", activitypub.ErrMalformed)
		}
		if !same(a.ObjectID) {
			return fmt.Errorf("%w: Delete of %s from another host", ErrOrigin, a.ObjectID)
		}
	case "Undo":
		switch {
		case a.Object != nil && a.Object.Actor != "":
			if a.Object.Actor != a.Actor {
				return fmt.Errorf("%w: Undo of an activity of %s", ErrOrigin, a.Object.Actor)
			}
		case a.ObjectID != "":
			if !same(a.ObjectID) {
				return fmt.Errorf("%w: Undo of %s from another host", ErrOrigin, a.ObjectID)
			}
		default:
			return fmt.Errorf("%w: Undo without an object", activitypub.ErrMalformed)
		}
	}
	return nil
}

// isActorDelete reports whether a deletes its own actor.
func isActorDelete(a *activitypub.Activity) bool {
	return a.Type == "Delete" && a.ObjectID == a.Actor
}
