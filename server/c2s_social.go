package server

import (
	"net/http"

	"github.com/courier-ap/courier/activitypub"

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

// move handles a Move of the actor itself to another account.
func (s *Server) move(r *http.Request, actor *store.Actor, req *c2sWire) (*store.Activity, error) {
	return nil, store.Errorf(store.EUNPROCESSABLE, "Move is not supported yet")
}
