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

// origin returns the scheme and lower-cased host (with port) of an absolute
// http(s) URL, and false for anything else.
func origin(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", false
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), true
}

// hostOf returns the lower-cased host name (without port) of a URL, or "".
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

// authority returns the lower-cased host of a URL with its port, if any,
// as delivery keys hosts, or "".
func authority(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// checkURLs checks that the activity's id and actor are absolute http(s)
// URLs.
func checkURLs(a *activitypub.Activity) error {
	if _, ok := origin(a.ID); !ok {
		return fmt.Errorf("%w: id %q", ErrBadURL, a.ID)
	}
	if _, ok := origin(a.Actor); !ok {
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
func checkOrigin(a *activitypub.Activity) error {
	own, _ := origin(a.Actor)
	same := func(id string) bool {
		o, ok := origin(id)
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
