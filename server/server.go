// Package server is courier's HTTP ActivityPub surface: discovery
// (WebFinger, host-meta, NodeInfo), the documents of local actors, notes
// and activities with content negotiation (ActivityPub JSON for peers, a
// small HTML page for browsers), the outbox, followers and following
// collections, and client-to-server writes to an actor's outbox.
//
// The server never opens a transaction nor talks to a broker: every write
// is one store method that stores the data and enqueues its events in one
// transaction. The inbox routes (/users/{name}/inbox, /inbox) belong to
// package inbox; cmd mounts both on one router.
//
// It serves the instance actor too (discovered by WebFinger), and signed
// GETs: a followers-only item to a follower's signed fetch, and with
// --authorized-fetch (Config.AuthorizedFetch) every document only to a
// verified signer. Statuses, error bodies, bearer tokens and cursors are
// package httpedge's, shared with app, inbox and admin.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/store"
)

// Config configures a Server.
type Config struct {
	// Store is the repository; required. Its base URL is the instance's.
	Store *store.Store
	// Logger receives request failures that need an operator. Nil discards.
	Logger *slog.Logger
	// Version is the software version NodeInfo reports (default "dev").
	Version string
	// MaxBodyBytes bounds a client-to-server request body (default 1 MiB).
	MaxBodyBytes int64
	// PageSize is the number of items per collection page (default 20, at
	// most store.MaxPageSize).
	PageSize int
	// Keys resolves the keys of signed GETs, so that followers-only and
	// direct items are served to a signed GET from a server one of whose
	// actors may see them (as Mastodon does). Nil: signatures are not
	// read, and such items are served to their author only. Required with
	// AuthorizedFetch.
	Keys KeyResolver
	// Actors fetches remote actor documents afresh (a Move's target must
	// list the moving actor in alsoKnownAs). Nil: Keys when it can (the
	// Resolver does), else a Move is refused.
	Actors ActorFetcher
	// Objects fetches a remote object (the author of a quoted object not
	// held here, to send it the quote's QuoteRequest). Nil: Keys when it
	// can (the Resolver does), else such a quote sends no QuoteRequest.
	Objects ObjectFetcher
	// AuthorizedFetch requires a verified signature on every ActivityPub
	// GET of a document (actors, collections, objects, activities), except
	// the instance actor and its key, so that fetching the key of a signed
	// GET cannot deadlock (Mastodon's AUTHORIZED_FETCH; GoToSocial always).
	// Discovery (WebFinger, host-meta, NodeInfo), HTML pages and an actor's
	// client with its bearer token on the actor's own /users/{name} routes
	// are not affected. Default false.
	AuthorizedFetch bool
	// OutboxStream makes an actor's outbox collection name its eventStream,
	// /users/{name}/outbox/stream, which package app serves (mounted beside
	// on the same router). Default false: no eventStream.
	OutboxStream bool
	// Now is the clock signed GETs' Date is checked against (default
	// time.Now).
	Now func() time.Time
	// Mentions resolves a Mention named @user@host (without an href) in a
	// client's object to the actor's id, by WebFinger. Nil: such a mention
	// of a remote actor is refused (422); one of a local actor is resolved
	// by the store.
	Mentions func(ctx context.Context, user, host string) (string, error)
	// AllowPrivateAddresses accepts http (not only https) URLs in a
	// client's attachments and links and a profile's icon and image, for
	// tests on loopback (--allow-private-addresses).
	AllowPrivateAddresses bool
	// Failures throttles failed bearer-token attempts per client address;
	// share one with the admin API. Nil: a throttle of the server's own
	// with limit's defaults.
	Failures *limit.Failures
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.PageSize <= 0 {
		c.PageSize = store.DefaultPageSize
	}
	if f, ok := c.Keys.(ActorFetcher); ok && c.Actors == nil {
		c.Actors = f
	}
	if f, ok := c.Keys.(ObjectFetcher); ok && c.Objects == nil {
		c.Objects = f
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Failures == nil {
		c.Failures = limit.NewFailures(nil)
	}
	return c
}

func (c Config) validate() error {
	if c.Store == nil {
		return errors.New("server: Config.Store is required")
	}
	if c.AuthorizedFetch && c.Keys == nil {
		return errors.New("server: Config.Keys is required with AuthorizedFetch")
	}
	if c.PageSize > store.MaxPageSize {
		return fmt.Errorf("server: PageSize %d is over the maximum %d", c.PageSize, store.MaxPageSize)
	}
	return nil
}

// Server serves the ActivityPub surface. Its handlers are safe for
// concurrent use.
type Server struct {
	cfg  Config
	st   *store.Store
	uris store.URIs
	log  *slog.Logger

	mentions mentionCache // WebFinger answers for mentions (mentions.go)
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, st: cfg.Store, uris: cfg.Store.URIs(), log: cfg.Logger}, nil
}

// Register mounts the server's routes on r:
//
//	GET  /.well-known/webfinger, /.well-known/host-meta, /.well-known/nodeinfo, /nodeinfo/2.1
//	GET  /actor, /actor/outbox (empty)
//	GET  /users/{name}, /users/{name}/followers, /users/{name}/following, /users/{name}/featured (empty)
//	GET  /users/{name}/followers_synchronization (FEP-8fcf; signed GETs only: followsync.go)
//	GET  /users/{name}/outbox     POST /users/{name}/outbox (Authorization: Bearer)
//	GET  /objects/{id}, /objects/{id}/likes, /objects/{id}/shares
//	GET  /activities/{id}
func (s *Server) Register(r *mux.Router) {
	r.HandleFunc("/.well-known/webfinger", s.webfinger).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/.well-known/host-meta", s.hostMeta).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/.well-known/nodeinfo", s.nodeInfoLinks).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/nodeinfo/2.1", s.nodeInfo).Methods(http.MethodGet, http.MethodHead)

	r.HandleFunc("/actor", s.instanceActor).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/actor/outbox", s.doc(s.instanceOutbox)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}/featured", s.doc(s.featured)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}", s.doc(s.actor)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}/outbox", s.doc(s.outbox)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}/outbox", s.postOutbox).Methods(http.MethodPost)
	r.HandleFunc("/users/{name}/followers", s.doc(s.followers)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}"+store.FollowersSyncPath, s.followersSync).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/users/{name}/following", s.doc(s.following)).Methods(http.MethodGet, http.MethodHead)

	r.HandleFunc("/objects/{id}", s.doc(s.object)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/tags/{name}", s.doc(s.tag)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/objects/{id}/likes", s.doc(s.reactions(store.ReactionLike))).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/objects/{id}/shares", s.doc(s.reactions(store.ReactionAnnounce))).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/activities/{id}", s.doc(s.activity)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/quotes/{id}", s.doc(s.quoteStamp)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/objects/{id}/replies", s.doc(s.replies)).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/contexts/{id}", s.doc(s.conversation)).Methods(http.MethodGet, http.MethodHead)
}

// Handler returns a router with only this server's routes, answering
// unknown paths and methods with JSON errors.
func (s *Server) Handler() http.Handler {
	r := mux.NewRouter()
	s.Register(r)
	r.NotFoundHandler = httpedge.NotFoundHandler()
	r.MethodNotAllowedHandler = httpedge.MethodNotAllowedHandler(r)
	return r
}

// writeJSON writes v as JSON (no HTML escaping, as ActivityPub documents
// carry HTML content) with content type ct.
// writeDoc writes an ActivityPub document in the negotiated JSON type.
func writeDoc(w http.ResponseWriter, r *http.Request, status int, v any) {
	w.Header().Add("Vary", "Accept")
	httpedge.WriteJSON(w, status, jsonRepr(r).contentType(), v)
}

// writeRawDoc writes stored document bytes in the negotiated JSON type.
func writeRawDoc(w http.ResponseWriter, r *http.Request, status int, b []byte) {
	w.Header().Add("Vary", "Accept")
	httpedge.WriteRaw(w, status, jsonRepr(r).contentType(), b)
}

// jsonRepr is the negotiated JSON representation (HTML requests to a route
// that has no page get activity+json).
func jsonRepr(r *http.Request) representation {
	if rep := negotiate(r.Header.Get("Accept")); rep == reprLD {
		return reprLD
	}
	return reprJSON
}

// owner reports whether the request carries a valid bearer token of actor
// a. A request without a bearer token is not the owner; a request with a
// wrong one is EUNAUTHORIZED, so that a client learns its token is bad
// instead of silently seeing the public view.
func (s *Server) owner(r *http.Request, a *store.Actor) (bool, error) {
	tok, present := httpedge.Bearer(r)
	if !present {
		return false, nil
	}
	if _, err := s.auth().Authenticate(r, a.Name, tok); err != nil {
		return false, err
	}
	return true, nil
}

// auth checks bearer tokens as local actors' under the failed-token
// throttle the server shares with the application's routes.
func (s *Server) auth() httpedge.Auth {
	return httpedge.Auth{Store: s.st, Failures: s.cfg.Failures}
}
