package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/limit"
	"github.com/courier-ap/courier/metrics"
	"github.com/courier-ap/courier/store"
)

// Handler serves the inboxes: POST /users/{name}/inbox and POST /inbox. It
// is safe for concurrent use.
type Handler struct {
	cfg  Config
	log  *slog.Logger // cfg.Logger
	st   *store.Store // cfg.Store
	keys *keyCache
	rec  *recorder
	life *lifeLimiter
	// verify checks request signatures against cfg.DateWindow and cfg.Now.
	verify activitypub.VerifyOptions
	// domains answers domain-block checks, from memory until domain blocks
	// change through the store or DomainBlockTTL ends.
	domains *domainCache
	// authority and scheme are those of the store's base URL, which every
	// request must be addressed to (checkHost).
	authority, scheme string
	// budgets are the per-remote-host inbound budgets.
	budgets *budgets
}

// New returns a Handler for cfg.
func New(cfg Config) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	checker, err := cfg.Store.NewDomainBlockChecker(context.Background())
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	rec, err := newRecorder(cfg.DB, cfg.MaxBatch)
	if err != nil {
		return nil, err
	}
	own, scheme, err := authority(cfg.Store.URIs().Base)
	if err != nil {
		return nil, err
	}
	domains := newDomainCache(checker.IsDomainBlocked, cfg.DomainBlockTTL, cfg.Now)
	cfg.Store.OnDomainBlocksChange(domains.invalidate)
	return &Handler{
		authority: own,
		scheme:    scheme,
		budgets:   newBudgets(cfg),
		domains:   domains,
		cfg:       cfg,
		log:       cfg.Logger,
		st:        cfg.Store,
		keys:      newKeyCache(cfg.KeyCacheTTL, cfg.Now),
		rec:       rec,
		life:      &lifeLimiter{every: cfg.SignOfLifeInterval, now: cfg.Now, last: map[string]time.Time{}},
		verify:    activitypub.VerifyOptions{Window: cfg.DateWindow, Now: cfg.Now},
	}, nil
}

// Register mounts the inboxes on r: POST /users/{name}/inbox, POST /inbox
// and POST /actor/inbox (the instance actor's, the same as /inbox). Other
// methods on those paths are left to r (the server package registers
// none).
func (h *Handler) Register(r *mux.Router) {
	// The shared inbox first: most deliveries go to it.
	r.HandleFunc("/inbox", func(w http.ResponseWriter, req *http.Request) {
		h.serve(w, req, "")
	}).Methods(http.MethodPost)
	// The instance actor's inbox (relays deliver there) is the shared one.
	r.HandleFunc("/actor/inbox", func(w http.ResponseWriter, req *http.Request) {
		h.serve(w, req, "")
	}).Methods(http.MethodPost)
	r.HandleFunc("/users/{name}/inbox", func(w http.ResponseWriter, req *http.Request) {
		h.serve(w, req, mux.Vars(req)["name"])
	}).Methods(http.MethodPost)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, name string) {
	ctx := r.Context()
	res, err := h.accept(ctx, w, r, name)
	if err != nil {
		status, result := classify(err)
		h.cfg.Metrics.Request(result)
		if d := deferral(err); d != nil && ctx.Err() == nil {
			h.deferred(ctx, w, r, name, d)
			return
		}
		if status >= http.StatusInternalServerError && ctx.Err() != nil {
			h.log.DebugContext(ctx, "inbox: request ended by its client", "inbox", inboxLabel(name), "err", err)
			httpedge.WriteMessage(w, status, "request cancelled")
			return
		}
		if status >= http.StatusInternalServerError {
			h.log.ErrorContext(ctx, "inbox: cannot store an activity", "inbox", inboxLabel(name), "err", err)
			httpedge.WriteMessage(w, status, "internal error")
			return
		}
		h.log.DebugContext(ctx, "inbox: request refused", "inbox", inboxLabel(name), "status", status,
			"result", result, "err", err)
		if wait, ok := httpedge.RetryAfter(err); ok {
			w.Header().Set("Retry-After", limit.RetryAfter(wait))
		}
		httpedge.WriteMessage(w, status, err.Error())
		return
	}
	h.cfg.Metrics.Request(res)
	w.WriteHeader(http.StatusAccepted)
}

// deferred answers a request courier cannot verify or store now 503 with
// Retry-After, counts it by reason, and records it against the sender's
// host for the admin view.
func (h *Handler) deferred(ctx context.Context, w http.ResponseWriter, r *http.Request, name string, d *DeferredError) {
	h.cfg.Metrics.Deferred(d.Reason)
	host := requestHost(activitypub.RequestSignature(r))
	h.budgets.deferred(host)
	h.log.InfoContext(ctx, "inbox: request deferred (503) for a temporary condition", "inbox", inboxLabel(name),
		"host", host, "reason", d.Reason, "retry_after", limit.RetryAfter(d.Wait)+"s", "err", d.Err)
	w.Header().Set("Retry-After", limit.RetryAfter(d.Wait))
	httpedge.WriteMessage(w, http.StatusServiceUnavailable, d.Error())
}

func inboxLabel(name string) string {
	if name == "" {
		return "shared"
	}
	return name
}

// accept runs the acceptance path and returns the metrics result of an
// accepted request (accepted, duplicate, ignored, or the dropped Delete).
func (h *Handler) accept(ctx context.Context, w http.ResponseWriter, r *http.Request, name string) (string, error) {
	if err := h.checkHost(r); err != nil {
		return "", err
	}
	if !activitypub.IsActivityPubContentType(r.Header.Get("Content-Type")) {
		return "", ErrContentType
	}
	host := requestHost(activitypub.RequestSignature(r))
	if err := h.budgets.admit(ctx, host); err != nil {
		return "", err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return "", err
	}
	if err := activitypub.CheckText(body); err != nil {
		return "", err
	}
	sig, err := activitypub.RequestSignature(r)
	if err != nil {
		return "", err
	}
	act, err := activitypub.ParseActivity(body)
	if err != nil {
		return "", err
	}
	var refs urls
	if err := checkURLs(&refs, act); err != nil {
		return "", err
	}
	if err := activitypub.CheckActivityURLs(act); err != nil {
		return "", err
	}
	if h.st.URIs().IsLocal(act.Actor) {
		return "", fmt.Errorf("%w: %s is a local actor", ErrOrigin, act.Actor)
	}
	var local *store.Actor
	if name != "" {
		if local, err = h.st.ActorByName(ctx, name); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return "", fmt.Errorf("%w: %s", ErrUnknownInbox, name)
			}
			return "", err
		}
	}
	if err := h.checkDomains(ctx, &refs, sig.KeyID, act.Actor); err != nil {
		return "", err
	}
	owner, err := h.authenticate(ctx, r, body, sig, act)
	if errors.Is(err, errDropDelete) {
		return resultDroppedDelete, nil // unverified: no sign of life either
	}
	if err != nil {
		return "", err
	}
	proved, err := h.checkProofs(ctx, &refs, body, act)
	if err != nil {
		return "", err
	}
	if owner != act.Actor && !proved {
		return "", fmt.Errorf("%w: key %s is owned by %s, not %s, and no integrity proof of the actor's verifies",
			ErrActorMismatch, sig.KeyID, owner, act.Actor)
	}
	h.budgets.charge(host, len(body))
	if err := checkOrigin(&refs, act); err != nil {
		return "", err
	}
	if err := h.checkBlocked(ctx, local, act); err != nil {
		return "", err
	}
	h.collectionSync(ctx, r, sig, act.Actor) // FEP-8fcf: followsync.go
	relevant, err := h.concerns(ctx, act)
	if err != nil {
		return "", err
	}
	if !relevant {
		h.budgets.ignored(host)
		h.signOfLife(ctx, refs.authority(sig.KeyID))
		return resultIgnored, nil
	}
	dup, err := h.rec.store(ctx, record{
		activityID: act.ID, typ: act.Type, actor: act.Actor, objectID: act.ObjectID, inbox: name,
		keyID: sig.KeyID, document: body, receivedAt: h.cfg.Now().UTC(),
	})
	if err != nil {
		return "", err
	}
	h.signOfLife(ctx, refs.authority(sig.KeyID))
	h.reportScheme(ctx, sig, refs.authority(sig.KeyID))
	if dup {
		return metrics.InboxDuplicate, nil
	}
	return metrics.InboxAccepted, nil
}

// readBody reads the body, refusing more than MaxBody bytes.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > h.cfg.MaxBody {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, r.ContentLength, h.cfg.MaxBody)
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody), r.ContentLength)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, h.cfg.MaxBody)
		}
		return nil, fmt.Errorf("%w: reading the body: %v", activitypub.ErrMalformed, err)
	}
	return body, nil
}

// readAll reads r to its end like io.ReadAll, into a buffer sized for the
// announced length (a hint: a body of another length is read all the same).
func readAll(r io.Reader, length int64) ([]byte, error) {
	const least, most = 512, 1 << 20
	b := make([]byte, 0, min(max(length+1, least), most))
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// checkDomains refuses a sender whose key or actor is on a blocked domain.
func (h *Handler) checkDomains(ctx context.Context, refs *urls, keyID, actor string) error {
	keyHost := refs.hostOf(keyID)
	if err := h.checkDomain(ctx, keyHost); err != nil {
		return err
	}
	if actorHost := refs.hostOf(actor); actorHost != keyHost {
		return h.checkDomain(ctx, actorHost)
	}
	return nil
}

// checkDomain refuses host when it is on a blocked domain.
func (h *Handler) checkDomain(ctx context.Context, host string) error {
	blocked, err := h.domains.blocked(ctx, host)
	if err != nil {
		return err
	}
	if blocked {
		return fmt.Errorf("%w: %s", ErrDomainBlocked, host)
	}
	return nil
}

// checkBlocked refuses an activity from an actor that the local actor it
// is for blocks: the owner of the personal inbox, the local actor it
// follows or blocks, or the author of the local object it is about.
func (h *Handler) checkBlocked(ctx context.Context, local *store.Actor, act *activitypub.Activity) error {
	var ids []int64
	if local != nil {
		ids = append(ids, local.ID)
	}
	if target := act.ObjectID; target != "" && h.st.URIs().IsLocal(target) {
		if a, err := h.st.ActorByURI(ctx, target); err == nil {
			ids = append(ids, a.ID)
		} else if o, err := h.st.ObjectByURI(ctx, target); err == nil && o.Local() {
			ids = append(ids, o.ActorID)
		}
	}
	for _, id := range ids {
		blocked, err := h.st.Blocks(ctx, id, act.Actor)
		if err != nil {
			return err
		}
		if blocked {
			return fmt.Errorf("%w: %s", ErrActorBlocked, act.Actor)
		}
	}
	return nil
}

// signOfLife reports host, the sender's (the host of the key id's URL,
// with its port, if any), to Health, at most once per SignOfLifeInterval
// per host.
func (h *Handler) signOfLife(ctx context.Context, host string) {
	if h.cfg.Health == nil {
		return
	}
	if host == "" || !h.life.due(host) {
		return
	}
	h.cfg.Health.SignOfLife(ctx, host)
}

// maxLifeHosts bounds the sign-of-life limiter's memory; when full it is
// cleared, which only lets one more sign of life per host through.
const maxLifeHosts = 10000

// lifeLimiter lets one sign of life per host through per interval.
type lifeLimiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
}

func (l *lifeLimiter) due(host string) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[host]; ok && now.Sub(t) < l.every && now.Sub(t) >= 0 {
		return false
	}
	if len(l.last) >= maxLifeHosts {
		clear(l.last)
	}
	l.last[host] = now
	return true
}
