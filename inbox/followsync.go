package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Followers synchronization, receiving side (FEP-8fcf, with Mastodon's
// safety rules). A verified POST whose signature covers a
// Collection-Synchronization header naming its actor's own followers
// collection (the collectionId the actor's document gives, the partial
// collection on the actor's origin) says which of courier's local actors
// that actor's server believes follow it, as a digest. The inbox
// compares it with the digest of the local actors that follow the actor
// here (accepted follows); when they differ it enqueues EventFollowersSync,
// whose id derives from the actor's server and the current
// FollowersSyncInterval window, so a server gets at most one sync per
// window, whatever it sends. The handler (HandlerFollowersSync, under the
// ledger) fetches the partial collection once, signed, through the
// Resolver's guarded and gated fetch, bounded by DerefTimeout and the
// fetcher's body limit, and stops at anything but one page of items. Then,
// in one transaction:
//
//   - a local actor's accepted follow that the list lacks is sent again as
//     a Follow (the remote lost it);
//   - a local actor the list names whose follow courier holds as pending
//     is marked accepted (the Accept was lost); one with no follow here
//     gets an Undo of its Follow sent, so the remote drops it. This part is
//     destructive on the remote's side, so it is done only when the digest
//     of the fetched list equals the header's (the list is the one the
//     header meant; Mastodon's re-check).
//
// A fetch that fails, for whatever reason, changes nothing. Each header
// looked at and each sync run is counted in
// courier_inbox_followers_sync_total{result}.

// EventFollowersSync is the outbox event type of a followers
// synchronization; its payload is a FollowersSyncRequest.
const EventFollowersSync = "inbox.followers_sync"

// HandlerFollowersSync is the ledger name of its handler. Keep it stable.
const HandlerFollowersSync = "inbox.followers_sync"

// FollowersSyncRequest is the payload of an EventFollowersSync event.
type FollowersSyncRequest struct {
	Actor  string `json:"actor"`  // the remote actor whose followers are synchronized
	URL    string `json:"url"`    // its partial collection of courier's followers
	Digest string `json:"digest"` // the digest its header gave
}

// Results of courier_inbox_followers_sync_total.
const (
	SyncInSync         = "in_sync"         // the header's digest is courier's: nothing to do
	SyncRequested      = "requested"       // digests differ: a sync enqueued (at most one per server and window)
	SyncIgnored        = "ignored"         // unsigned, malformed, or naming another collection or origin
	SyncRepaired       = "repaired"        // a sync ran and acted on the list
	SyncDigestMismatch = "digest_mismatch" // the fetched list is not the header's: Follows re-sent, nothing undone
	SyncFetchFailed    = "fetch_failed"    // the partial collection could not be fetched: nothing changed
	SyncRefused        = "refused"         // the partial collection is paginated, malformed or too large: nothing changed
)

// FollowersSyncResults lists the results of
// courier_inbox_followers_sync_total, for metrics.Known.
func FollowersSyncResults() []string {
	return []string{SyncInSync, SyncRequested, SyncIgnored, SyncRepaired, SyncDigestMismatch, SyncFetchFailed, SyncRefused}
}

// syncSpace is the UUID namespace of followers synchronization event ids.
var syncSpace = uuid.MustParse("5c0d7e1a-93b4-5f62-a8d1-0e4b7c2f9a35")

// followersSyncEventID is the id of the sync of the server of prefix in
// the window starting at window.
func followersSyncEventID(prefix string, window time.Time) string {
	return uuid.NewSHA1(syncSpace, []byte(strings.ToLower(prefix)+" "+strconv.FormatInt(window.UnixMilli(), 10))).String()
}

// collectionSync looks at the Collection-Synchronization header of a
// verified POST by actor, signed by sig, and enqueues a sync when it calls
// for one. It never fails the request: what goes wrong is logged and
// counted.
func (h *Handler) collectionSync(ctx context.Context, r *http.Request, sig *activitypub.SignatureParams, actor string) {
	v := r.Header.Get(activitypub.CollectionSyncHeader)
	if v == "" {
		return
	}
	result, err := h.noteCollectionSync(ctx, v, sig, actor)
	if err != nil {
		h.log.InfoContext(ctx, "inbox: followers synchronization header not acted on", "actor", actor, "err", err)
	}
	h.cfg.Metrics.FollowersSync(result)
}

func (h *Handler) noteCollectionSync(ctx context.Context, v string, sig *activitypub.SignatureParams, actor string) (string, error) {
	if !sig.Signs("collection-synchronization") {
		return SyncIgnored, nil // not vouched for by the signature
	}
	cs, err := activitypub.ParseCollectionSync(v)
	if err != nil {
		return SyncIgnored, err
	}
	prefix := activitypub.URLPrefix(actor)
	if activitypub.URLPrefix(cs.URL) != prefix {
		return SyncIgnored, fmt.Errorf("partial collection %s is not on the actor's origin", cs.URL)
	}
	a, err := h.cfg.Resolver.Actor(ctx, actor)
	if err != nil {
		return SyncIgnored, err
	}
	if a.Followers == "" || cs.CollectionID != a.Followers {
		return SyncIgnored, fmt.Errorf("collection %s is not the actor's followers", cs.CollectionID)
	}
	follows, err := h.st.LocalFollowsOf(ctx, actor)
	if err != nil {
		return SyncIgnored, err
	}
	if localDigest(follows) == cs.Digest {
		return SyncInSync, nil
	}
	payload, err := json.Marshal(FollowersSyncRequest{Actor: actor, URL: cs.URL, Digest: cs.Digest})
	if err != nil {
		return SyncIgnored, err
	}
	now := h.cfg.Now().UTC()
	window := now.Truncate(h.cfg.FollowersSyncInterval)
	ev := outbox.Event{ID: followersSyncEventID(prefix, window), Type: EventFollowersSync, Payload: payload, OccurredAt: now}
	if err := h.cfg.DB.Tx(ctx, func(tx *sql.Tx) error { return outbox.Enqueue(ctx, tx, ev) }); err != nil {
		return SyncIgnored, err
	}
	return SyncRequested, nil
}

// localDigest is the digest of the local actors whose follow of a remote
// actor is accepted.
func localDigest(follows []store.LocalFollow) string {
	var ids []string
	for _, f := range follows {
		if f.State == store.StateAccepted {
			ids = append(ids, f.URI)
		}
	}
	return activitypub.FollowersDigest(ids)
}

// documentFetcher is the optional Resolver method the sync fetches its
// partial collection with; *activitypub.Resolver implements it.
type documentFetcher interface {
	Fetch(ctx context.Context, url string) ([]byte, string, error)
}

// followersSync handles an EventFollowersSync event (see the top of this
// file).
func (im *Importer) followersSync(ctx context.Context, ev outbox.Event) error {
	var p FollowersSyncRequest
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Actor == "" || p.URL == "" {
		return outbox.Permanent(fmt.Errorf("inbox: followers sync %s: bad payload", ev.ID))
	}
	result, err := im.syncFollowers(ctx, ev, p)
	if err != nil {
		return fmt.Errorf("inbox: followers sync of %s: %w", p.Actor, err)
	}
	im.cfg.Metrics.FollowersSync(result)
	im.log.InfoContext(ctx, "inbox: followers synchronization", "event_id", ev.ID, "actor", p.Actor, "result", result)
	return nil
}

func (im *Importer) syncFollowers(ctx context.Context, ev outbox.Event, p FollowersSyncRequest) (string, error) {
	f, ok := im.cfg.Resolver.(documentFetcher)
	if !ok {
		return SyncFetchFailed, nil
	}
	fctx, cancel := context.WithTimeout(ctx, DerefTimeout)
	body, _, err := f.Fetch(fctx, p.URL)
	cancel()
	if err != nil {
		im.log.InfoContext(ctx, "inbox: partial followers collection not fetched", "url", p.URL, "err", err)
		return SyncFetchFailed, nil
	}
	items, err := partialItems(body)
	if err != nil {
		im.log.InfoContext(ctx, "inbox: partial followers collection refused", "url", p.URL, "err", err)
		return SyncRefused, nil
	}
	follows, err := im.st.LocalFollowsOf(ctx, p.Actor)
	if err != nil {
		return "", err
	}
	matches := activitypub.FollowersDigest(items) == p.Digest
	listed := map[string]bool{}
	for _, id := range items {
		if im.st.URIs().IsLocal(id) {
			listed[id] = true
		}
	}
	held := map[string]store.LocalFollow{}
	for _, fl := range follows {
		held[fl.URI] = fl
	}
	now := im.cfg.Now().UTC()
	err = im.cfg.DB.Tx(ctx, func(tx *sql.Tx) error {
		for _, fl := range follows {
			if fl.State != store.StateAccepted || listed[fl.URI] {
				continue
			}
			// The remote lost this follow: send the Follow again.
			local, err := im.st.ActorByURITx(ctx, tx, fl.URI)
			if store.ErrorCode(err) == store.ENOTFOUND {
				continue
			}
			if err != nil {
				return err
			}
			if _, _, err := im.st.EnqueueEventActivityTx(ctx, tx, outbox.ChildID(ev.ID, "follow "+fl.URI), now,
				local, "Follow", p.Actor, []string{p.Actor}, nil); err != nil {
				return err
			}
		}
		if !matches {
			return nil
		}
		for _, id := range slices.Sorted(func(yield func(string) bool) {
			for id := range listed {
				if !yield(id) {
					return
				}
			}
		}) {
			fl, ok := held[id]
			switch {
			case ok && fl.State == store.StateAccepted:
			case ok: // pending here, accepted there: the Accept was lost
				if _, err := im.st.SetFollowingStateTx(ctx, tx, store.FollowingRef{Target: p.Actor, LocalActor: id},
					store.StateAccepted); err != nil {
					return err
				}
			default: // no follow here: the remote is to drop it
				local, err := im.st.ActorByURITx(ctx, tx, id)
				if store.ErrorCode(err) == store.ENOTFOUND {
					continue
				}
				if err != nil {
					return err
				}
				if _, _, err := im.st.EnqueueEventActivityTx(ctx, tx, outbox.ChildID(ev.ID, "undo "+id), now,
					local, "Undo", store.FollowObject("", id, p.Actor), []string{p.Actor}, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if !matches {
		return SyncDigestMismatch, nil
	}
	return SyncRepaired, nil
}

// partialItems reads a partial followers collection: one Collection or
// OrderedCollection (or a page of one) whose items are given in full, as
// ids or objects with ids, at most store.MaxFollowersSync, each once. A
// collection that points to pages (first, next) is refused: Mastodon
// stops there too, and a list read in part would undo follows that are
// real.
func partialItems(body []byte) ([]string, error) {
	var c struct {
		Type         string            `json:"type"`
		First        json.RawMessage   `json:"first"`
		Next         json.RawMessage   `json:"next"`
		Items        []json.RawMessage `json:"items"`
		OrderedItems []json.RawMessage `json:"orderedItems"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", activitypub.ErrMalformed, err)
	}
	switch c.Type {
	case "Collection", "OrderedCollection", "CollectionPage", "OrderedCollectionPage":
	default:
		return nil, fmt.Errorf("%w: a %q, not a collection", activitypub.ErrMalformed, c.Type)
	}
	if isSet(c.First) || isSet(c.Next) {
		return nil, fmt.Errorf("%w: the collection has pages", activitypub.ErrMalformed)
	}
	raw := c.OrderedItems
	if raw == nil {
		raw = c.Items
	}
	if len(raw) > store.MaxFollowersSync {
		return nil, fmt.Errorf("%w: more than %d items", activitypub.ErrTooLarge, store.MaxFollowersSync)
	}
	seen := make(map[string]bool, len(raw))
	out := make([]string, 0, len(raw))
	for _, it := range raw {
		var id string
		if err := json.Unmarshal(it, &id); err != nil {
			var o struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(it, &o); err != nil || o.ID == "" {
				return nil, fmt.Errorf("%w: an item without an id", activitypub.ErrMalformed)
			}
			id = o.ID
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

func isSet(m json.RawMessage) bool { return len(m) > 0 && string(m) != "null" }
