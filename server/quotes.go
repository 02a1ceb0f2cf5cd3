package server

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// Quote consent (FEP-044f): the QuoteAuthorizations courier grants are
// served at /quotes/{id} to whoever may see the quoted object; a revoked
// one, or one of a deleted object, is 410 Gone. An actor answers a
// QuoteRequest awaiting its approval with a client-to-server Accept or
// Reject whose object is the request (its id, or embedded), and revokes a
// stamp with a Delete of it. See docs/quotes.md.

// quoteStamp serves /quotes/{id}.
func (s *Server) quoteStamp(w http.ResponseWriter, r *http.Request) {
	st, err := s.st.StampByLocalID(r.Context(), mux.Vars(r)["id"])
	if err == nil && st.State == "pending" {
		err = store.Errorf(store.ENOTFOUND, "no quote authorization %q", st.LocalID)
	}
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	o, err := s.st.ObjectByRowID(r.Context(), st.ObjectID)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if st.State == "revoked" || o.Deleted() {
		t := map[string]any{"@context": activitypub.ActivityStreams, "id": st.URI, "type": "Tombstone",
			"formerType": store.QuoteAuthorizationType}
		writeDoc(w, r, http.StatusGone, t)
		return
	}
	public := publicOrUnlisted(o)
	if err := s.visible(r, public, o.ActorID, "quote authorization", st.LocalID, o.To, o.CC); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if !public {
		w.Header().Set("Cache-Control", "private, no-store")
	}
	writeDoc(w, r, http.StatusOK, store.StampDocument(st, o.AttributedTo, o.URI))
}

// answerQuote handles an Accept or Reject whose object is a QuoteRequest
// the actor received; ok is false when it is not one (a Follow, then).
func (s *Server) answerQuote(r *http.Request, actor *store.Actor, typ string, req *c2sWire) (*store.Activity, bool, error) {
	obj, err := embedded(req.Object)
	if err != nil {
		return nil, false, err
	}
	id := objectID(req.Object)
	if obj != nil {
		if t := str(obj.Type); t != store.QuoteRequestType {
			return nil, false, nil
		}
		id = str(obj.ID)
		if id == "" {
			return nil, true, store.Errorf(store.EINVALID, "%s of a QuoteRequest needs the request's id", typ)
		}
	} else {
		if id == "" {
			return nil, false, nil
		}
		ok, err := s.st.IsQuoteRequest(r.Context(), actor, id)
		if err != nil || !ok {
			return nil, false, err
		}
	}
	act, err := s.st.AnswerQuote(r.Context(), actor, id, typ)
	return act, true, err
}

// ObjectFetcher fetches a remote object; *activitypub.Resolver's Object.
type ObjectFetcher interface {
	Object(ctx context.Context, id string) (*activitypub.Object, error)
}

// quotedAuthor returns the author of the quoted object q: a local or held
// object's attributedTo, else the fetched object's; "" when it cannot be
// known (the quote is then published without a QuoteRequest).
func (s *Server) quotedAuthor(r *http.Request, q string) string {
	if o, err := s.st.ObjectByURI(r.Context(), q); err == nil {
		return o.AttributedTo
	}
	if s.uris.IsLocal(q) || s.cfg.Objects == nil {
		return ""
	}
	o, err := s.cfg.Objects.Object(r.Context(), q)
	if err != nil || len(o.AttributedTo) == 0 {
		s.log.InfoContext(r.Context(), "client write: quoted object not fetched; no QuoteRequest sent", "object", q, "err", err)
		return ""
	}
	if !validURL(o.AttributedTo[0]) {
		return ""
	}
	return o.AttributedTo[0]
}
