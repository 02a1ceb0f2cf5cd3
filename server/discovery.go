package server

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// webfinger answers /.well-known/webfinger?resource=acct:name@host (or an
// actor URL) with the actor's JRD: 400 for a missing or malformed
// resource, 404 for another host or an unknown actor.
func (s *Server) webfinger(w http.ResponseWriter, r *http.Request) {
	res := r.URL.Query().Get("resource")
	if res == "" {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.EINVALID, "resource parameter is required"))
		return
	}
	if s.instanceWebFinger(w, res) {
		return
	}
	user, host, err := activitypub.ParseWebFingerResource(res)
	if err != nil {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.EINVALID, "resource %q is malformed", res))
		return
	}
	if !strings.EqualFold(host, s.uris.Host()) {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.ENOTFOUND, "%q is not on this server", res))
		return
	}
	if strings.Contains(res, "://") {
		// An actor URL must be one of ours exactly (scheme included).
		if u, err := url.Parse(res); err != nil || !s.uris.IsLocal(u.Scheme+"://"+u.Host+u.Path) {
			httpedge.WriteError(w, r, s.log, store.Errorf(store.ENOTFOUND, "%q is not on this server", res))
			return
		}
	}
	a, err := s.st.ActorByName(r.Context(), user)
	if errors.Is(err, store.ErrNotFound) {
		if _, derr := s.st.DeletedActor(r.Context(), user); derr == nil {
			err = store.Errorf(store.EGONE, "actor %q was deleted", user)
		} else if !errors.Is(derr, store.ErrNotFound) {
			err = derr
		}
	}
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	jrd := activitypub.NewWebFinger(a.Name, s.uris.Host(), a.URI, a.URI)
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpedge.WriteJSON(w, http.StatusOK, activitypub.JRDContentType, jrd)
}

func (s *Server) hostMeta(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpedge.WriteRaw(w, http.StatusOK, activitypub.XRDContentType+"; charset=utf-8", activitypub.HostMeta(s.uris.Base))
}

func (s *Server) nodeInfoLinks(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpedge.WriteJSON(w, http.StatusOK, "application/json", activitypub.NewNodeInfoLinks(s.uris.Base))
}

// nodeInfo answers NodeInfo 2.1. courier keeps no login times, so every
// local actor counts as active.
func (s *Server) nodeInfo(w http.ResponseWriter, r *http.Request) {
	users, err := s.st.CountActors(r.Context())
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	posts, err := s.st.CountLocalNotes(r.Context())
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	n := int64(users)
	doc := activitypub.NewNodeInfo(s.cfg.Version,
		activitypub.NodeInfoUsers{Total: n, ActiveHalfyear: n, ActiveMonth: n}, int64(posts))
	w.Header().Set("Access-Control-Allow-Origin", "*")
	httpedge.WriteJSON(w, http.StatusOK, activitypub.NodeInfoContentType, doc)
}
