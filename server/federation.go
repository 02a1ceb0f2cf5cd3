package server

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
)

// orderedCollection is an empty OrderedCollection with its items inline.
type orderedCollection struct {
	Context      any    `json:"@context,omitempty"`
	ID           string `json:"id"`
	Type         string `json:"type"`
	TotalItems   int    `json:"totalItems"`
	OrderedItems []any  `json:"orderedItems"`
}

// instanceWebFinger answers WebFinger for the instance actor, whose
// resource is acct:{host without port}@{host} (its preferredUsername),
// acct:{host}@{host}, or its id; GoToSocial confirms every actor signing a
// GET this way before it trusts it. It reports whether res was the
// instance actor's. The instance actor takes precedence over a local
// actor of the same name.
func (s *Server) instanceWebFinger(w http.ResponseWriter, res string) bool {
	id := s.uris.InstanceActor()
	if res != id {
		user, host, err := activitypub.ParseWebFingerResource(res)
		if err != nil || strings.Contains(res, "://") || !strings.EqualFold(host, s.uris.Host()) {
			return false
		}
		if !strings.EqualFold(user, s.uris.InstanceUsername()) && !strings.EqualFold(user, s.uris.Host()) {
			return false
		}
	}
	jrd := activitypub.NewWebFinger(s.uris.InstanceUsername(), s.uris.Host(), id, s.uris.Base+"/")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpedge.WriteJSON(w, http.StatusOK, activitypub.JRDContentType, jrd)
	return true
}

// instanceOutbox serves /actor/outbox: the instance actor posts nothing,
// but names an outbox, which peers fetch.
func (s *Server) instanceOutbox(w http.ResponseWriter, r *http.Request) {
	writeDoc(w, r, http.StatusOK, orderedCollection{
		Context: activitypub.ActivityStreams, ID: s.uris.InstanceOutbox(), Type: "OrderedCollection",
		OrderedItems: []any{},
	})
}

// featured serves /users/{name}/featured, the pinned posts Mastodon and
// GoToSocial fetch for every actor they meet: the objects the actor
// pinned by a C2S Add (c2s_profile.go), embedded, the latest pinned first.
func (s *Server) featured(w http.ResponseWriter, r *http.Request) {
	a, err := s.st.ActorByName(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	items, err := s.featuredItems(r, a)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	writeDoc(w, r, http.StatusOK, orderedCollection{
		Context: activitypub.ActivityStreams, ID: s.uris.Featured(a.Name), Type: "OrderedCollection",
		TotalItems: len(items), OrderedItems: items,
	})
}
