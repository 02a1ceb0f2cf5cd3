package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// actor serves /users/{name}: the Person document, or the HTML profile;
// for a deleted actor (its Delete still being delivered, or its row
// already removed) 410 Gone with a Tombstone, as Mastodon and GoToSocial
// expect.
func (s *Server) actor(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	a, err := s.st.ActorByName(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		if at, derr := s.st.DeletedActor(r.Context(), name); derr == nil {
			if negotiate(r.Header.Get("Accept")) == reprHTML {
				httpedge.WriteError(w, r, s.log, store.Errorf(store.EGONE, "actor %q was deleted", name))
				return
			}
			t := s.st.ActorTombstone(name, at)
			t.Context = activitypub.ActivityStreams
			writeDoc(w, r, http.StatusGone, t)
			return
		} else if !errors.Is(derr, store.ErrNotFound) {
			err = derr
		}
	}
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if negotiate(r.Header.Get("Accept")) == reprHTML {
		notes, err := s.st.RecentPublicNotes(r.Context(), a.ID, s.cfg.PageSize)
		if err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
		s.renderHTML(w, r, profilePage(s.uris, a, notes))
		return
	}
	doc := s.st.ActorDocument(a)
	moved, err := s.st.MovedTo(r.Context(), a.ID)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	doc.SetMovedTo(moved)
	writeDoc(w, r, http.StatusOK, doc)
}

// Collection and CollectionPage documents.
type collection struct {
	Context    any    `json:"@context,omitempty"`
	ID         string `json:"id"`
	Type       string `json:"type"`
	TotalItems int    `json:"totalItems"`
	First      string `json:"first,omitempty"`
	Last       string `json:"last,omitempty"`
	// EventStream is the collection's Server-Sent Events ("Server-Sent
	// Events for the ActivityPub API"), when it has one.
	EventStream string `json:"eventStream,omitempty"`
}

type collectionPage struct {
	Context      any    `json:"@context,omitempty"`
	ID           string `json:"id"`
	Type         string `json:"type"`
	TotalItems   int    `json:"totalItems"`
	PartOf       string `json:"partOf"`
	Next         string `json:"next,omitempty"`
	Prev         string `json:"prev,omitempty"`
	OrderedItems any    `json:"orderedItems"`
}

// outbox serves /users/{name}/outbox: an OrderedCollection whose first page
// is ?page=true, then keyset pages ?max_id= (older) and ?min_id= (newer).
// Only public activities are listed, unless the request carries the
// actor's own bearer token.
func (s *Server) outbox(w http.ResponseWriter, r *http.Request) {
	a, err := s.st.ActorByName(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	own, err := s.owner(r, a)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if own {
		w.Header().Set("Cache-Control", "private, no-store")
	}
	q := r.URL.Query()
	base := s.uris.Outbox(a.Name)
	maxID, err1 := httpedge.Cursor(q.Get("max_id"))
	minID, err2 := httpedge.Cursor(q.Get("min_id"))
	if err := errors.Join(err1, err2); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	paged := q.Get("page") != "" || maxID > 0 || minID > 0
	p, err := s.st.OutboxPage(r.Context(), a.ID, store.PageQuery{
		Before: maxID, After: minID, Limit: s.cfg.PageSize, IncludePrivate: own,
	})
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if !paged {
		c := collectionHead(base, p.Total)
		if s.cfg.OutboxStream {
			c.Context = []any{activitypub.ActivityStreams, activitypub.EventStreamTerm}
			c.EventStream = base + "/stream"
		}
		writeDoc(w, r, http.StatusOK, c)
		return
	}
	id := pageID(base, "max_id", maxID)
	if maxID == 0 {
		id = pageID(base, "min_id", minID)
	}
	items := make([]json.RawMessage, 0, len(p.Items))
	for _, it := range p.Items {
		items = append(items, it.Document)
	}
	page := collectionPage{
		Context: activitypub.ActivityStreams, ID: id, Type: "OrderedCollectionPage",
		TotalItems: p.Total, PartOf: base, OrderedItems: items,
	}
	if p.Next > 0 {
		page.Next = base + "?page=true&max_id=" + strconv.FormatInt(p.Next, 10)
	}
	if p.Prev > 0 {
		page.Prev = base + "?page=true&min_id=" + strconv.FormatInt(p.Prev, 10)
	}
	writeDoc(w, r, http.StatusOK, page)
}

// pageNumber parses ?page=N (1-based); "true" means 1; absent means 0 (the
// collection itself).
func pageNumber(v string) (int, error) {
	switch v {
	case "":
		return 0, nil
	case "true":
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		return 0, store.Errorf(store.EINVALID, "page %q is not a positive integer", v)
	}
	return n, nil
}

func (s *Server) followers(w http.ResponseWriter, r *http.Request) {
	s.actorCollection(w, r, func(a *store.Actor, offset, limit int) ([]string, int, error) {
		fs, total, err := s.st.Followers(r.Context(), a.ID, store.StateAccepted, offset, limit)
		ids := make([]string, 0, len(fs))
		for _, f := range fs {
			ids = append(ids, f.URI)
		}
		return ids, total, err
	}, s.uris.Followers)
}

func (s *Server) following(w http.ResponseWriter, r *http.Request) {
	s.actorCollection(w, r, func(a *store.Actor, offset, limit int) ([]string, int, error) {
		fs, total, err := s.st.FollowingOf(r.Context(), a.ID, offset, limit)
		ids := make([]string, 0, len(fs))
		for _, f := range fs {
			ids = append(ids, f.TargetURI)
		}
		return ids, total, err
	}, s.uris.Following)
}

// actorCollection serves a followers/following OrderedCollection with
// totalItems and numbered pages (?page=N) of actor ids.
func (s *Server) actorCollection(w http.ResponseWriter, r *http.Request,
	list func(a *store.Actor, offset, limit int) ([]string, int, error), idOf func(string) string) {
	a, err := s.st.ActorByName(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	n, err := pageNumber(r.URL.Query().Get("page"))
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	size := s.cfg.PageSize
	offset := 0
	if n > 0 {
		offset = (n - 1) * size
	}
	ids, total, err := list(a, offset, size)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	base := idOf(a.Name)
	if n == 0 {
		writeDoc(w, r, http.StatusOK, collection{
			Context: activitypub.ActivityStreams, ID: base, Type: "OrderedCollection",
			TotalItems: total, First: base + "?page=1",
		})
		return
	}
	page := collectionPage{
		Context: activitypub.ActivityStreams, ID: base + "?page=" + strconv.Itoa(n), Type: "OrderedCollectionPage",
		TotalItems: total, PartOf: base, OrderedItems: ids,
	}
	if offset+len(ids) < total {
		page.Next = base + "?page=" + strconv.Itoa(n+1)
	}
	if n > 1 {
		page.Prev = base + "?page=" + strconv.Itoa(n-1)
	}
	writeDoc(w, r, http.StatusOK, page)
}

// visible returns nil when the reader of r may see a local object or
// activity of author addressed to to and cc, and otherwise the not-found
// error of the kind's id: public and unlisted ones are for everyone, others
// for their author's bearer token and for a signed GET from a server one of
// whose actors may see them (see signerMaySee).
func (s *Server) visible(r *http.Request, public bool, authorID int64, kind, id string, to, cc []string) error {
	if public {
		return nil
	}
	a, err := s.st.ActorByID(r.Context(), authorID)
	if err != nil {
		return err
	}
	ok, err := s.owner(r, a)
	if err != nil {
		return err
	}
	if !ok {
		if ok, err = s.signerMaySee(r, a, to, cc); err != nil {
			return err
		}
	}
	if !ok {
		return store.Errorf(store.ENOTFOUND, "no %s %q", kind, id)
	}
	return nil
}

// publicOrUnlisted reports whether o is for everyone to read.
func publicOrUnlisted(o *store.Object) bool {
	return o.Visibility == store.VisibilityPublic || o.Visibility == store.VisibilityUnlisted
}

// object serves /objects/{id}: the Note with likes and shares collections
// carrying totalItems, 410 Gone with a Tombstone once deleted, or the HTML
// page.
func (s *Server) object(w http.ResponseWriter, r *http.Request) {
	o, err := s.st.ObjectByLocalID(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if o.Deleted() {
		if negotiate(r.Header.Get("Accept")) == reprHTML {
			s.renderHTMLStatus(w, r, http.StatusGone, gonePage(o))
			return
		}
		t := store.Tombstone(o)
		t.Context = activitypub.ActivityStreams
		writeDoc(w, r, http.StatusGone, t)
		return
	}
	public := publicOrUnlisted(o)
	if err := s.visible(r, public, o.ActorID, "object", o.LocalID, o.To, o.CC); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if !public {
		w.Header().Set("Cache-Control", "private, no-store")
	}
	likes, shares, err := s.st.ReactionCounts(r.Context(), o.URI)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	emoji, err := s.st.EmojiCounts(r.Context(), o.URI)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if negotiate(r.Header.Get("Accept")) == reprHTML {
		a, err := s.st.ActorByID(r.Context(), o.ActorID)
		if err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
		page := notePage(s.uris, a, o, likes, shares)
		page.Note.Emoji = emojiLines(emoji)
		s.renderHTML(w, r, page)
		return
	}
	doc, err := decodeDoc(o.Document)
	if err != nil {
		httpedge.WriteError(w, r, s.log, fmt.Errorf("server: stored document of %s: %w", o.URI, err))
		return
	}
	if o.Type == "Question" {
		counts, err := s.st.PollCounts(r.Context(), o)
		if err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
		doc = store.WithPollCounts(doc, counts)
	}
	doc["@context"] = store.ObjectContext(o.Context)
	doc["likes"] = collection{ID: s.uris.Likes(o.LocalID), Type: "Collection", TotalItems: likes}
	doc["shares"] = collection{ID: s.uris.Shares(o.LocalID), Type: "Collection", TotalItems: shares}
	rp, err := s.st.Replies(r.Context(), o.URI, 0, 1) // threads.go
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	doc["replies"] = collection{ID: s.uris.Replies(o.LocalID), Type: "OrderedCollection", TotalItems: rp.Total,
		First: s.uris.Replies(o.LocalID) + "?page=true"}
	if sum := reactionsSummary(emoji); sum != nil { // reactions.go
		doc["reactions"] = sum
	}
	writeDoc(w, r, http.StatusOK, doc)
}

// tag serves /tags/{name}: the local public objects carrying the hashtag,
// newest first, as an OrderedCollection paged by cursor (max_id).
func (s *Server) tag(w http.ResponseWriter, r *http.Request) {
	name := HashtagName(mux.Vars(r)["name"])
	if name == "" {
		httpedge.WriteError(w, r, s.log, store.Errorf(store.ENOTFOUND, "no such hashtag"))
		return
	}
	base := s.uris.Base + "/tags/" + url.PathEscape(name)
	q := r.URL.Query()
	maxID, err := httpedge.Cursor(q.Get("max_id"))
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	p, err := s.st.TaggedObjects(r.Context(), name, maxID, s.cfg.PageSize)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if q.Get("page") == "" && maxID == 0 {
		writeDoc(w, r, http.StatusOK, collectionHead(base, p.Total))
		return
	}
	id := pageID(base, "max_id", maxID)
	items := make([]json.RawMessage, 0, len(p.Items))
	for _, it := range p.Items {
		items = append(items, it.Document)
	}
	page := collectionPage{
		Context: store.ObjectContext(nil), ID: id, Type: "OrderedCollectionPage",
		TotalItems: p.Total, PartOf: base, OrderedItems: items,
	}
	if p.Next > 0 {
		page.Next = base + "?page=true&max_id=" + strconv.FormatInt(p.Next, 10)
	}
	writeDoc(w, r, http.StatusOK, page)
}

// reactions serves /objects/{id}/likes and /shares: a Collection with the
// count (the reacting actors are not listed).
func (s *Server) reactions(typ string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
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
		likes, shares, err := s.st.ReactionCounts(r.Context(), o.URI)
		if err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
		c := collection{Context: activitypub.ActivityStreams, ID: s.uris.Likes(o.LocalID), Type: "Collection", TotalItems: likes}
		if typ == store.ReactionAnnounce {
			c.ID, c.TotalItems = s.uris.Shares(o.LocalID), shares
		}
		writeDoc(w, r, http.StatusOK, c)
	}
}

// activity serves /activities/{id}: the activity's exact bytes. A Create
// or Update of a deleted object is 410 Gone with the object's Tombstone.
func (s *Server) activity(w http.ResponseWriter, r *http.Request) {
	a, err := s.st.ActivityByLocalID(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	var to, cc []string
	if !a.Public {
		if to, cc, err = audienceOf(a.Document); err != nil {
			httpedge.WriteError(w, r, s.log, err)
			return
		}
	}
	if err := s.visible(r, a.Public, a.ActorID, "activity", a.LocalID(), to, cc); err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	if !a.Public {
		w.Header().Set("Cache-Control", "private, no-store")
	}
	if (a.Type == "Create" || a.Type == "Update") && a.ObjectURI != "" {
		o, err := s.st.ObjectByURI(r.Context(), a.ObjectURI)
		if err == nil && o.Deleted() {
			t := store.Tombstone(o)
			t.Context = activitypub.ActivityStreams
			writeDoc(w, r, http.StatusGone, t)
			return
		}
	}
	writeRawDoc(w, r, http.StatusOK, a.Document)
}

// instanceActor serves /actor, the server's own Application actor whose key
// signs courier's fetches.
func (s *Server) instanceActor(w http.ResponseWriter, r *http.Request) {
	inst, err := s.st.InstanceActor(r.Context())
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	doc, err := s.st.InstanceDocument(inst)
	if err != nil {
		httpedge.WriteError(w, r, s.log, err)
		return
	}
	writeRawDoc(w, r, http.StatusOK, doc)
}

// collectionHead is the head of the paged collection base: its total and
// its first page.
func collectionHead(base string, total int) collection {
	return collection{
		Context: activitypub.ActivityStreams, ID: base, Type: "OrderedCollection",
		TotalItems: total, First: base + "?page=true",
	}
}

// pageID is the id of the page of collection base at cursor param (none
// when cursor is 0).
func pageID(base, param string, cursor int64) string {
	if cursor == 0 {
		return base + "?page=true"
	}
	return base + "?page=true&" + param + "=" + strconv.FormatInt(cursor, 10)
}
