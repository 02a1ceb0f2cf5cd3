package server

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// Threads peers can complete: /objects/{id}/replies lists the replies
// courier holds to a local object (local and remote), and /contexts/{id}
// the objects of a conversation (FEP-7888), each an OrderedCollection of
// ids whose pages (?page=true, then ?page=true&min_id=) run oldest first.
// Each item is listed to a reader as the item itself is served: a public
// or unlisted one to anyone, a local followers-only or direct one to its
// author and to a signed GET from a server one of whose actors may see it;
// a remote one that is neither public nor unlisted is not listed.

// replies serves /objects/{id}/replies.
func (s *Server) replies(w http.ResponseWriter, r *http.Request) {
	o, err := s.st.ObjectByLocalID(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if o.Deleted() {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.EGONE, "object %q was deleted", o.LocalID))
		return
	}
	if err := s.visible(r, publicOrUnlisted(o), o.ActorID, "object", o.LocalID, o.To, o.CC); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	s.thread(w, r, s.uris.Replies(o.LocalID), func(after int64) (*store.ThreadPage, error) {
		return s.st.Replies(r.Context(), o.URI, after, s.cfg.PageSize)
	})
}

// conversation serves /contexts/{id}.
func (s *Server) conversation(w http.ResponseWriter, r *http.Request) {
	id := s.uris.Context(mux.Vars(r)["id"])
	ok, err := s.st.ConversationExists(r.Context(), id)
	if err == nil && !ok {
		err = store.Errorf(store.ENOTFOUND, "no conversation %q", id)
	}
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	s.thread(w, r, id, func(after int64) (*store.ThreadPage, error) {
		return s.st.Conversation(r.Context(), id, after, s.cfg.PageSize)
	})
}

// thread serves the collection base whose pages list reads.
func (s *Server) thread(w http.ResponseWriter, r *http.Request, base string, list func(after int64) (*store.ThreadPage, error)) {
	q := r.URL.Query()
	minID, err := httpedge.Cursor(q.Get("min_id"))
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	p, err := list(minID)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if q.Get("page") == "" && minID == 0 {
		writeDoc(w, r, http.StatusOK, collectionHead(base, p.Total))
		return
	}
	id := pageID(base, "min_id", minID)
	items := make([]string, 0, len(p.Items))
	private := false
	for _, it := range p.Items {
		if !it.Public {
			if it.ActorID == 0 || s.visible(r, false, it.ActorID, "object", it.URI, it.To, it.CC) != nil {
				continue
			}
			private = true
		}
		items = append(items, it.URI)
	}
	if private {
		w.Header().Set("Cache-Control", "private, no-store")
	}
	page := collectionPage{
		Context: activitypub.ActivityStreams, ID: id, Type: "OrderedCollectionPage",
		TotalItems: p.Total, PartOf: base, OrderedItems: items,
	}
	if p.Next > 0 {
		page.Next = base + "?page=true&min_id=" + strconv.FormatInt(p.Next, 10)
	}
	writeDoc(w, r, http.StatusOK, page)
}
