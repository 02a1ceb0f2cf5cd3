package server

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// followersSync serves GET /users/{name}/followers_synchronization, the
// partial followers collection of FEP-8fcf (Mastodon's path and shape):
// one OrderedCollection whose orderedItems are the actor's accepted
// followers on the server of the actor whose key signed the GET (ids
// equal to or under its scheme://host), sorted, never paginated. It
// requires a verified signature, authorized fetch or not (401 without);
// a server with more than store.MaxFollowersSync followers of the actor
// gets 422.
func (s *Server) followersSync(w http.ResponseWriter, r *http.Request) {
	a, err := s.st.ActorByName(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	signer, err := s.signedBy(r)
	if err == nil && signer == "" {
		err = store.Errorf(httpedge.ESignature, "the partial followers collection needs a signed GET")
	}
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	prefix := activitypub.URLPrefix(signer)
	if prefix == "" {
		httpedge.WriteError(w, r, s.log, store.Errorf(httpedge.ESignature, "signer %q is not an http(s) actor", signer))
		return
	}
	ids, err := s.st.FollowersOn(r.Context(), a.Name, prefix)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if ids == nil {
		ids = []string{}
	}
	w.Header().Set("Cache-Control", "private, no-store")
	writeDoc(w, r, http.StatusOK, partialCollection{Context: activitypub.ActivityStreams,
		ID: s.uris.Actor(a.Name) + store.FollowersSyncPath, Type: "OrderedCollection",
		TotalItems: len(ids), OrderedItems: ids})
}

type partialCollection struct {
	Context      any      `json:"@context"`
	ID           string   `json:"id"`
	Type         string   `json:"type"`
	TotalItems   int      `json:"totalItems"`
	OrderedItems []string `json:"orderedItems"`
}
