package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// DerefTimeout bounds one dereferencing fetch of an import.
const DerefTimeout = 15 * time.Second

// objectFetcher is the optional Resolver method inbound dereferencing uses;
// *activitypub.Resolver implements it.
type objectFetcher interface {
	Object(ctx context.Context, id string) (*activitypub.Object, error)
}

// dereference fetches, before the import's transaction, the object an
// activity names only by reference, when courier should hold it:
//
//   - the object of a Create or Update given by id only, fetched from the
//     actor's own origin (an object elsewhere is refused: the actor cannot
//     vouch for it), whose attributedTo must name the actor;
//   - the object of an Update that embeds an object courier does not hold
//     (its Create is late or lost), fetched the same way: what its origin
//     serves now, not the Update's copy;
//   - the original of an Announce of a remote object by an actor that a
//     local actor follows (a Mastodon boost, a Lemmy community's Announce
//     of a Create), fetched from the object's own origin, whose attributedTo
//     must be on that origin. What the Announce embeds is never trusted.
//
// It makes at most one fetch, bounded by DerefTimeout and the fetcher's
// body limit. It returns the object to store, or an outcome when there is
// nothing to store (refused, gone), or an error worth a retry (the remote
// is down). An activity needing none of this gives a nil object and no
// outcome.
func (im *Importer) dereference(ctx context.Context, act *activitypub.Activity) (*activitypub.Object, importOutcome, error) {
	f, ok := im.cfg.Resolver.(objectFetcher)
	if !ok {
		return nil, importOutcome{}, nil
	}
	var c urls
	var id, author string // what to fetch; the actor it must be attributed to ("": any on its origin)
	switch {
	case (act.Type == "Create" || act.Type == "Update") && act.Object == nil && act.ObjectID != "" && act.ObjectID != act.Actor:
		id, author = act.ObjectID, act.Actor
		o1, ok1 := c.origin(id)
		o2, ok2 := c.origin(act.Actor)
		if !ok1 || !ok2 || o1 != o2 {
			return nil, refused("the object is not on the actor's origin"), nil
		}
	case act.Type == "Announce":
		id = act.ObjectID
		if inner := act.Object; inner != nil && inner.Actor != "" {
			// An embedded activity: a Lemmy community announces every
			// activity in it; only a Create or Update brings an object.
			if (inner.Type != "Create" && inner.Type != "Update") || inner.ObjectID == "" {
				return nil, importOutcome{}, nil
			}
			id = inner.ObjectID // Announce{Create{Page}}
		}
		if id == "" || im.st.URIs().IsLocal(id) {
			return nil, importOutcome{}, nil
		}
		if _, err := im.st.ObjectByURI(ctx, id); err == nil {
			return nil, importOutcome{}, nil // already held: nothing to fetch
		} else if store.ErrorCode(err) != store.ENOTFOUND {
			return nil, importOutcome{}, err
		}
		followed, err := im.st.FollowedLocally(ctx, act.Actor)
		if err != nil {
			return nil, importOutcome{}, err
		}
		if !followed {
			return nil, importOutcome{}, nil
		}
	case act.Type == "Update" && act.Object != nil && storedType(act.Object.Type) && act.Object.ID != "":
		// An Update of an object courier never saw (its Create is late,
		// or was lost): the object as its origin serves it now, rather
		// than what the Update carries or nothing. A held object is
		// compared with the Update's copy as before.
		id, author = act.Object.ID, act.Actor
		if _, err := im.st.ObjectByURI(ctx, id); err == nil {
			return nil, importOutcome{}, nil
		} else if store.ErrorCode(err) != store.ENOTFOUND {
			return nil, importOutcome{}, err
		}
		o1, ok1 := c.origin(id)
		o2, ok2 := c.origin(act.Actor)
		if !ok1 || !ok2 || o1 != o2 {
			return nil, refused("the object is not on the actor's origin"), nil
		}
	default:
		return nil, importOutcome{}, nil
	}
	if act.Type == "Create" || act.Type == "Update" {
		// What a tombstone names is not fetched; the import's transaction
		// gives the outcome (tombstone.go).
		if dead, err := im.st.RemoteTombstoned(ctx, id); err != nil || dead {
			return nil, importOutcome{}, err
		}
	}
	fctx, cancel := context.WithTimeout(ctx, DerefTimeout)
	defer cancel()
	o, err := f.Object(fctx, id)
	if err != nil {
		if outcome, final := derefRefusal(err); final {
			im.log.DebugContext(ctx, "inbox: dereference refused", "activity_id", act.ID, "object", id, "err", err)
			return nil, outcome, nil
		}
		return nil, importOutcome{}, fmt.Errorf("dereference %s: %w", id, err)
	}
	if !storedType(o.Type) {
		return nil, outcomeOf(OutcomeUnsupported), nil
	}
	if author != "" && !slices.Contains(o.AttributedTo, author) {
		return nil, refused("the fetched object is not attributed to the actor"), nil
	}
	if author == "" {
		oo, _ := c.origin(id)
		if len(o.AttributedTo) == 0 {
			return nil, refused("the fetched object has no author"), nil
		}
		if ao, ok := c.origin(o.AttributedTo[0]); !ok || ao != oo {
			return nil, refused("the fetched object's author is not on its origin"), nil
		}
	}
	return o, importOutcome{}, nil
}

// derefRefusal tells a fetch failure that will not change on a retry (the
// object is gone, refused, malformed or unreachable by policy) from one
// that may, and gives the outcome of the former.
func derefRefusal(err error) (importOutcome, bool) {
	var se *activitypub.StatusError
	switch {
	case errors.Is(err, activitypub.ErrGone), errors.Is(err, activitypub.ErrNotFound):
		return outcomeOf(OutcomeNoMatch), true
	case errors.As(err, &se):
		if se.Status >= 400 && se.Status < 500 && se.Status != http.StatusTooManyRequests && se.Status != http.StatusRequestTimeout {
			return refused(fmt.Sprintf("fetch answered %d", se.Status)), true
		}
		return importOutcome{}, false
	case errors.Is(err, activitypub.ErrIDMismatch), errors.Is(err, activitypub.ErrContentType),
		errors.Is(err, activitypub.ErrTooLarge), errors.Is(err, activitypub.ErrMalformed),
		errors.Is(err, activitypub.ErrBadURL), errors.Is(err, activitypub.ErrPrivateAddress):
		return refused(err.Error()), true
	}
	return importOutcome{}, false
}

// storeFetched stores an object fetched by dereference, in tx.
func (im *Importer) storeFetched(ctx context.Context, tx *sql.Tx, o *activitypub.Object) (importOutcome, error) {
	author := ""
	if len(o.AttributedTo) > 0 {
		author = o.AttributedTo[0]
	}
	written, err := im.st.UpsertRemoteObjectTx(ctx, tx, store.RemoteObject{
		URI: o.ID, Type: o.Type, AttributedTo: author, Content: o.Content, Summary: o.Summary,
		InReplyTo: o.InReplyTo, To: o.To, CC: o.Cc, Published: o.Published, Updated: o.Updated, Document: o.Raw,
	})
	if err != nil {
		return refusal(err, importOutcome{})
	}
	if !written {
		return outcomeOf(OutcomeStale), nil
	}
	return outcomeOf(OutcomeStored), nil
}
