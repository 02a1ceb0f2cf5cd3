package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"

	"github.com/courier-ap/courier/store"
)

// answerFollow handles Accept and Reject of a Follow the actor received:
// the object is the Follow's id, or the Follow embedded (its id, or its
// actor when it has none). An Accept approves a pending follower, a Reject
// refuses one or ends an accepted follower's follow.
func (s *Server) answerFollow(r *http.Request, actor *store.Actor, typ string, req *c2sWire) (*store.Activity, error) {
	var fr store.FollowRequest
	obj, err := embedded(req.Object)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		fr.FollowID = objectID(req.Object)
	} else {
		if t := str(obj.Type); t != "" && t != "Follow" {
			return nil, store.Errorf(store.EUNPROCESSABLE, "only a Follow can be accepted or rejected, not %q", t)
		}
		for _, followee := range activitypub.IDs(obj.Object) {
			if followee != actor.URI {
				return nil, store.Errorf(store.EFORBIDDEN, "the Follow is of %q, not of %s", followee, actor.URI)
			}
		}
		fr.FollowID = str(obj.ID)
		fr.Follower = objectID(obj.Actor)
	}
	if fr.FollowID == "" && fr.Follower == "" {
		return nil, store.Errorf(store.EINVALID, "%s needs the Follow's id or the Follow embedded with its actor", typ)
	}
	return s.st.AnswerFollow(r.Context(), actor, fr, typ)
}

// ActorFetcher fetches a remote actor's document afresh, bypassing any
// cache; *activitypub.Resolver's Refresh.
type ActorFetcher interface {
	Refresh(ctx context.Context, id string) (*activitypub.Actor, error)
}

// move handles a Move of the actor itself (object) to another account
// (target): the target's document, fetched afresh, must list the actor in
// alsoKnownAs (as Mastodon checks before it follows the move); then the
// Move goes to every follower and the actor names the target as movedTo.
func (s *Server) move(r *http.Request, actor *store.Actor, req *c2sWire) (*store.Activity, error) {
	object, target := objectID(req.Object), objectID(req.Target)
	switch {
	case object == "" || target == "":
		return nil, store.Errorf(store.EINVALID, "Move needs the actor as object and the new account as target")
	case object != actor.URI:
		return nil, store.Errorf(store.EFORBIDDEN, "only %s itself can be moved, not %q", actor.URI, object)
	case target == actor.URI:
		return nil, store.Errorf(store.EINVALID, "an actor cannot move to itself")
	case s.uris.IsLocal(target):
		return nil, store.Errorf(store.EUNPROCESSABLE, "moving to a local actor is not supported")
	case s.cfg.Actors == nil:
		return nil, store.Errorf(store.EUNPROCESSABLE, "this server cannot fetch the target to check the move")
	}
	if !validURL(target) {
		return nil, store.Errorf(store.EINVALID, "target %q is not an absolute http(s) URL", target)
	}
	a, err := s.cfg.Actors.Refresh(r.Context(), target)
	if err != nil {
		switch {
		case errors.Is(err, activitypub.ErrGone), errors.Is(err, activitypub.ErrNotFound),
			errors.Is(err, activitypub.ErrMalformed), errors.Is(err, activitypub.ErrIDMismatch),
			errors.Is(err, activitypub.ErrContentType), errors.Is(err, activitypub.ErrTooLarge),
			errors.Is(err, activitypub.ErrBadURL), errors.Is(err, activitypub.ErrPrivateAddress):
			return nil, store.Errorf(store.EUNPROCESSABLE, "the target %q is not an actor courier can fetch: %v", target, err)
		}
		return nil, store.Errorf(httpedge.EUnavailable, "the target %q could not be fetched now: %v", target, err)
	}
	if !slices.Contains(alsoKnownAs(a.Raw), actor.URI) {
		return nil, store.Errorf(store.EUNPROCESSABLE,
			"the target %q does not list %s in alsoKnownAs; add the alias on the new account first", target, actor.URI)
	}
	return s.st.MoveActor(r.Context(), actor, a.ID)
}

// alsoKnownAs returns the alsoKnownAs ids of an actor document: a string,
// a list of strings or of objects with ids.
func alsoKnownAs(doc json.RawMessage) []string {
	var d struct {
		AlsoKnownAs json.RawMessage `json:"alsoKnownAs"`
	}
	if json.Unmarshal(doc, &d) != nil {
		return nil
	}
	return activitypub.IDs(d.AlsoKnownAs)
}

// validURL reports whether s is an absolute http(s) URL without user
// information.
func validURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}
