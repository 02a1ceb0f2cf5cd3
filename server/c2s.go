package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// c2sWire is the loose shape of a client-to-server request: an activity,
// or a bare object (a Note) that the server wraps in a Create. Ids sent by
// the client are ignored: the server assigns them.
type c2sWire struct {
	Type         json.RawMessage `json:"type"`
	Actor        json.RawMessage `json:"actor"`
	AttributedTo json.RawMessage `json:"attributedTo"`
	Object       json.RawMessage `json:"object"`
	Target       json.RawMessage `json:"target"`
	To           json.RawMessage `json:"to"`
	Cc           json.RawMessage `json:"cc"`
	Bto          json.RawMessage `json:"bto"`
	Bcc          json.RawMessage `json:"bcc"`
	Content      json.RawMessage `json:"content"`
	Summary      json.RawMessage `json:"summary"`
	Name         json.RawMessage `json:"name"`
	Sensitive    json.RawMessage `json:"sensitive"`
	InReplyTo    json.RawMessage `json:"inReplyTo"`
	ID           json.RawMessage `json:"id"`
}

// decodeC2S decodes a JSON object body; anything else is EINVALID.
func decodeC2S(b []byte) (*c2sWire, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, store.Errorf(store.EINVALID, "body must be a JSON object")
	}
	var w c2sWire
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, store.Errorf(store.EINVALID, "body is not valid JSON: %v", err)
	}
	return &w, nil
}

// str returns a JSON string value, or the first string of a list, or "".
func str(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) == nil && len(l) > 0 {
		return str(l[0])
	}
	return ""
}

// embedded decodes raw as an embedded object; nil when raw is an id string
// or absent.
func embedded(raw json.RawMessage) (*c2sWire, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, nil
	}
	return decodeC2S(raw)
}

// objectID returns the id of the "object" property: a string, or an
// embedded object's id.
func objectID(raw json.RawMessage) string {
	ids := activitypub.IDs(raw)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// postOutbox handles client-to-server writes to /users/{name}/outbox. The
// request needs the actor's bearer token, a JSON body of at most
// MaxBodyBytes in application/activity+json, application/ld+json with the
// ActivityStreams profile, or plain application/json. It answers 201 with
// Location (the activity id) and the activity.
func (s *Server) postOutbox(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := mux.Vars(r)["name"]
	if _, err := s.st.ActorByName(ctx, name); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	tok, _ := httpedge.Bearer(r)
	if tok == "" {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.EUNAUTHORIZED, "an Authorization: Bearer token is required"))
		return
	}
	actor, err := s.auth().Authenticate(r, name, tok)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if !acceptedBody(r.Header.Get("Content-Type")) {
		httpedge.WriteError(w, r, s.log, store.Errorf(httpedge.EMediaType,
			"Content-Type must be application/activity+json, application/ld+json; profile=\"%s\" or application/json",
			activitypub.ActivityStreams))
		return
	}
	raw := r.Body
	if r.ContentLength > s.cfg.MaxBodyBytes {
		drainRefused(w, raw)
		httpedge.WriteError(w, r, s.log, store.Errorf(httpedge.ETooLarge, "body is larger than %d bytes", s.cfg.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			drainRefused(w, raw)
			httpedge.WriteError(w, r, s.log, store.Errorf(httpedge.ETooLarge, "body is larger than %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		httpedge.WriteError(w, r, s.log, store.Errorf(store.EINVALID, "reading body: %v", err))
		return
	}
	req, err := decodeC2S(body)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	doc, err := decodeDoc(body)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	act, err := s.dispatch(r, actor, req, doc)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	s.log.DebugContext(ctx, "client write", "actor", actor.Name, "type", act.Type, "activity", act.URI, "event_id", act.EventID)
	w.Header().Set("Location", act.URI)
	writeRawDoc(w, r, http.StatusCreated, act.Document)
}

// maxDrain bounds what is read of a body refused as too large.
const maxDrain = 8 << 20

// drainRefused reads and drops up to maxDrain bytes of the rest of a body
// refused as too large, and closes the connection after the answer: a
// client still sending the body (as common clients do, reading the answer
// only after) then reads the 413 instead of a reset connection. A body
// larger still is cut.
func drainRefused(w http.ResponseWriter, body io.Reader) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	w.Header().Set("Connection", "close")
}

// checkAuthor refuses a request that names another actor as its actor or
// author; absent, the authenticated actor is used.
func checkAuthor(actor *store.Actor, fields ...json.RawMessage) error {
	for _, f := range fields {
		for _, id := range activitypub.IDs(f) {
			if id != actor.URI {
				return store.Errorf(store.EFORBIDDEN, "cannot write as %q", id)
			}
		}
	}
	return nil
}

// dispatch runs the store method of one client-to-server request: req is
// its loose shape, doc the whole body (numbers kept as sent).
func (s *Server) dispatch(r *http.Request, actor *store.Actor, req *c2sWire, doc map[string]any) (*store.Activity, error) {
	ctx := r.Context()
	typ := str(req.Type)
	if typ == "" {
		return nil, store.Errorf(store.EINVALID, "the request has no type")
	}
	if err := checkAuthor(actor, req.Actor, req.AttributedTo); err != nil {
		return nil, err
	}
	if err := noBlindCopies(req); err != nil {
		return nil, err
	}
	switch typ {
	case "Create":
		obj, ok := doc["object"].(map[string]any)
		if !ok {
			return nil, store.Errorf(store.EUNPROCESSABLE, "a Create needs its object embedded")
		}
		return s.publishCreate(r, actor, obj, doc)
	case "Update":
		return s.update(r, actor, req, doc)
	case "Delete":
		id := objectID(req.Object)
		if id == "" {
			return nil, store.Errorf(store.EINVALID, "Delete needs an object")
		}
		if id == actor.URI {
			return nil, store.Errorf(store.EUNPROCESSABLE, "deleting an actor is not supported")
		}
		if !s.uris.IsLocal(id) {
			return nil, store.Errorf(store.EFORBIDDEN, "cannot delete %q: it belongs to another server", id)
		}
		if _, ok := s.uris.QuoteID(id); ok {
			return s.st.RevokeQuote(ctx, actor, id) // quotes.go
		}
		return s.st.DeleteObject(ctx, actor, id)
	case "Follow", "Like", "Announce", "Block":
		id := objectID(req.Object)
		if id == "" {
			return nil, store.Errorf(store.EINVALID, "%s needs an object", typ)
		}
		switch typ {
		case "Follow":
			return s.st.Follow(ctx, actor, id)
		case "Like":
			return s.st.Like(ctx, actor, id)
		case "Announce":
			return s.st.Announce(ctx, actor, id)
		default:
			return s.st.Block(ctx, actor, id)
		}
	case "Undo":
		return s.undo(r, actor, req)
	case "Add", "Remove":
		return s.addRemove(r, actor, typ, req) // c2s_profile.go
	case "Accept", "Reject":
		if act, ok, err := s.answerQuote(r, actor, typ, req); ok || err != nil { // quotes.go
			return act, err
		}
		return s.answerFollow(r, actor, typ, req)
	case "Move":
		return s.move(r, actor, req)
	}
	if activityTypes[typ] {
		return nil, store.Errorf(store.EUNPROCESSABLE, "activity type %q is not supported", typ)
	}
	// A bare object is wrapped in a Create (ActivityPub 6.2.1).
	return s.publishCreate(r, actor, doc, nil)
}

// noBlindCopies refuses bto and bcc: courier does not deliver blind
// copies, and dropping them silently would leave their recipients out.
func noBlindCopies(w *c2sWire) error {
	if len(activitypub.IDs(w.Bto))+len(activitypub.IDs(w.Bcc)) > 0 {
		return store.Errorf(store.EUNPROCESSABLE, "bto and bcc are not supported; address recipients in to or cc")
	}
	return nil
}

// update handles Update of an own object (its client properties replaced
// by the embedded object's) or of the actor itself (name and summary).
func (s *Server) update(r *http.Request, actor *store.Actor, req *c2sWire, doc map[string]any) (*store.Activity, error) {
	obj, err := embedded(req.Object)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, store.Errorf(store.EINVALID, "Update needs the updated object embedded")
	}
	id := str(obj.ID)
	if id == "" {
		return nil, store.Errorf(store.EINVALID, "the updated object has no id")
	}
	if id == actor.URI {
		return s.updateActor(r, actor, req.Object) // c2s_profile.go
	}
	if _, ok := s.uris.ActorName(id); ok {
		return nil, store.Errorf(store.EFORBIDDEN, "cannot update %q: an actor updates its own profile only", id)
	}
	if !s.uris.IsLocal(id) {
		return nil, store.Errorf(store.EFORBIDDEN, "cannot update %q: it belongs to another server", id)
	}
	for k := range doc {
		if !slices.Contains(createProperties, k) {
			return nil, store.Errorf(store.EUNPROCESSABLE, "the Update's property %q is not carried; set it on the object", k)
		}
	}
	m, _ := doc["object"].(map[string]any)
	if _, ok := m["type"]; !ok {
		// The type may be left out: the stored object's is kept.
		o, err := s.st.ObjectByURI(r.Context(), id)
		if err != nil {
			return nil, err
		}
		m = withType(m, o.Type)
	}
	return s.publishUpdate(r, actor, id, m)
}

func withType(m map[string]any, typ string) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out["type"] = typ
	return out
}

// undo handles Undo of an own Follow, Like, Announce or Block, named by
// id (a string or an embedded activity's id) or, without an id, by its
// type and object.
func (s *Server) undo(r *http.Request, actor *store.Actor, req *c2sWire) (*store.Activity, error) {
	id := objectID(req.Object)
	if id == "" {
		obj, err := embedded(req.Object)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			return nil, store.Errorf(store.EINVALID, "Undo needs an object")
		}
		typ, target := str(obj.Type), objectID(obj.Object)
		if !store.Undoable(typ) {
			return nil, store.Errorf(store.EUNPROCESSABLE, "undoing %q is not supported", typ)
		}
		if target == "" {
			return nil, store.Errorf(store.EINVALID, "Undo needs the id of the activity or its type and object")
		}
		if id, err = s.st.ActiveActivity(r.Context(), actor, typ, target); err != nil {
			return nil, err
		}
	}
	if !s.uris.IsLocal(id) {
		return nil, store.Errorf(store.EFORBIDDEN, "cannot undo %q: it belongs to another server", id)
	}
	return s.st.Undo(r.Context(), actor, id)
}
