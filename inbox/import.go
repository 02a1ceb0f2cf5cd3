package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Importer imports recorded inbound activities: it is the outbox handler
// HandlerImport of EventReceived events (Register), and its Run deletes
// recorded activities past Config.Retention. It is safe for concurrent use.
type Importer struct {
	cfg Config
	log *slog.Logger
	st  *store.Store
}

// NewImporter returns an Importer for cfg; it uses DB, Store, Resolver,
// Logger and Now.
func NewImporter(cfg Config) (*Importer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Importer{cfg: cfg, log: cfg.Logger, st: cfg.Store}, nil
}

// Register registers the import handler on reg: HandlerImport for
// EventReceived, and HandlerFollowersSync for EventFollowersSync.
func (im *Importer) Register(reg *outbox.Registry) {
	reg.Handle(EventReceived, HandlerImport, im.Import)
	reg.Handle(store.EventPollUpdate, HandlerPollUpdate, im.pollUpdate)
	reg.Handle(EventFollowersSync, HandlerFollowersSync, im.followersSync) // followsync.go
}

// Outcomes of an import, recorded in inbox_activities.outcome (the kinds
// of importOutcome). A refusal records "refused: " and the reason.
const (
	OutcomeFollowed    = "followed"     // follower stored, Accept enqueued
	OutcomePending     = "pending"      // follower stored, awaiting manual approval
	OutcomeUnfollowed  = "unfollowed"   // an Undo of a Follow removed the follower
	OutcomeUndone      = "undone"       // an Undo removed a reaction or a block
	OutcomeAnswered    = "answered"     // an Accept or Reject changed a local follow
	OutcomeStored      = "stored"       // a remote object was stored or updated
	OutcomeStale       = "stale"        // an older version of a stored object: kept the newer
	OutcomeDeleted     = "deleted"      // an object tombstoned
	OutcomeTombstoned  = "tombstoned"   // a Create or Update of an object deleted before it arrived: not stored
	OutcomeActorGone   = "actor_gone"   // a deleted actor's follows and objects dropped
	OutcomeCounted     = "counted"      // a Like or Announce of a local note recorded
	OutcomeVoted       = "voted"        // a vote on a local poll counted
	OutcomeBlocked     = "blocked"      // a remote actor's Block of a local actor recorded
	OutcomeActorUpdate = "actor_update" // an actor's Update of itself: its cached document refreshed
	OutcomeNoMatch     = "no_match"     // nothing known that the activity could change
	OutcomeIgnored     = "ignored"      // not about anything local, or not courier's business
	OutcomeUnsupported = "unsupported"  // a type courier does not import; recorded and acknowledged
	OutcomeLocal       = "local"        // a local actor's activity whose effect its own write made
)

// outcomeRefused is the kind of an importOutcome that refused the
// activity; its text is "refused: " and the reason.
const outcomeRefused = "refused"

// importOutcome is what an import did: its kind (an Outcome constant, or
// outcomeRefused with the reason why) and, as String, the text recorded in
// inbox_activities.outcome and logged. The zero value is no outcome yet.
type importOutcome struct {
	kind   string
	reason string // why it was refused
}

// outcomeOf is the outcome of kind kind, one of the Outcome constants.
func outcomeOf(kind string) importOutcome { return importOutcome{kind: kind} }

// refused is the outcome of an activity refused for reason.
func refused(reason string) importOutcome { return importOutcome{kind: outcomeRefused, reason: reason} }

// Refused reports whether the import refused the activity.
func (o importOutcome) Refused() bool { return o.kind == outcomeRefused }

// String is the outcome as recorded: its kind, or "refused: " and why.
func (o importOutcome) String() string {
	if o.kind == outcomeRefused {
		return "refused: " + o.reason
	}
	return o.kind
}

// storedType reports whether a Create or Update of an object of type t is
// stored: the content types courier publishes itself
// (activitypub.IsContentType), and Pleroma's and Misskey's ChatMessage.
func storedType(t string) bool { return activitypub.IsContentType(t) || t == "ChatMessage" }

const (
	sqlLoadActivity = `SELECT document, received_at, imported_at IS NOT NULL, key_id
		FROM inbox_activities WHERE activity_id = ?`
	// The import's transaction reads the imported mark first; the row
	// decides between two imports of one activity at once (two workers
	// that both claimed its event). SQLite's transaction holds the file's
	// write lock from its first statement, so the plain read is alone;
	// PostgreSQL runs both side by side, and the second waits on the row's
	// lock and then reads the first's mark.
	sqlImportedSQLite   = `SELECT imported_at IS NOT NULL FROM inbox_activities WHERE activity_id = ?`
	sqlImportedPostgres = sqlImportedSQLite + ` FOR UPDATE`
	// The activity's document goes once imported: what the import keeps
	// is in the store, and the row stays to recognise redeliveries by id.
	sqlMarkImported = `UPDATE inbox_activities SET imported_at = ?, outcome = ?, document = ''
		WHERE activity_id = ? AND imported_at IS NULL`
)

// Import imports the activity an EventReceived event names. The effects and
// the activity's imported mark are written in one transaction, and an
// activity already marked is skipped, so an event that runs again (a
// redelivery, a crash after the commit) never imports twice. Network work
// (resolving a new follower's inbox) happens before that transaction.
func (im *Importer) Import(ctx context.Context, ev outbox.Event) error {
	var p Received
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.ActivityID == "" {
		return outbox.Permanent(fmt.Errorf("inbox: import %s: bad payload", ev.ID))
	}
	var document []byte
	var received int64
	var imported bool
	var keyID string
	err := im.cfg.DB.Read.QueryRowContext(ctx, sqlLoadActivity, p.ActivityID).Scan(&document, &received, &imported, &keyID)
	if errors.Is(err, sql.ErrNoRows) {
		im.log.InfoContext(ctx, "inbox: import of an activity no longer recorded", "event_id", ev.ID,
			"activity_id", p.ActivityID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("inbox: import %s: load: %w", p.ActivityID, err)
	}
	if imported {
		return nil
	}
	act, err := activitypub.ParseActivity(document)
	var pre prepared
	if err == nil {
		if pre, err = im.prepare(ctx, act); err != nil {
			return fmt.Errorf("inbox: import %s: %w", p.ActivityID, err)
		}
	}
	var outcome importOutcome
	lockImported := sqlImportedSQLite
	if im.cfg.DB.Postgres() {
		lockImported = sqlImportedPostgres
	}
	err = im.cfg.DB.Tx(ctx, func(tx *sql.Tx) error {
		var done bool
		if err := tx.QueryRowContext(ctx, lockImported, p.ActivityID).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if act == nil {
			outcome = refused("unparseable")
		} else {
			var err error
			if outcome, err = im.apply(ctx, tx, ev.ID, time.UnixMilli(received).UTC(), act, pre); err != nil {
				return err
			}
			// The application's inbox view (package app), in this transaction.
			if err := im.recordApp(ctx, tx, act, outcome, pre.quote); err != nil {
				return err
			}
			// Its forward to local actors' followers, when due (forward.go).
			if err := im.forwardTx(ctx, tx, ev.ID, keyID, act, document, outcome); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, sqlMarkImported, im.cfg.Now().UnixMilli(), outcome.String(), p.ActivityID)
		return err
	})
	if err != nil {
		return fmt.Errorf("inbox: import %s: %w", p.ActivityID, err)
	}
	if outcome != (importOutcome{}) {
		im.log.DebugContext(ctx, "inbox: imported", "event_id", ev.ID, "activity_id", p.ActivityID,
			"outcome", outcome.String())
	}
	return nil
}

// prepared is what an import needs from the network, fetched before its
// transaction.
type prepared struct {
	// follower is the actor of a Follow of a local actor; nil when gone.
	follower *activitypub.Actor
	// fetched is the object dereference fetched; outcome, when set, is the
	// import's outcome decided before its transaction (see dereference).
	fetched *activitypub.Object
	outcome importOutcome
	// quote is the verdict on a quote of a local object (quote.go):
	// quoteApproved, quoteUnapproved, or "" when it quotes nothing local.
	quote string
}

// refresher is the optional Resolver method an actor's Update uses.
type refresher interface {
	Refresh(ctx context.Context, id string) (*activitypub.Actor, error)
}

func (im *Importer) prepare(ctx context.Context, act *activitypub.Activity) (prepared, error) {
	var pre prepared
	var err error
	if im.st.URIs().IsLocal(act.Actor) {
		return im.prepareLocal(ctx, act)
	}
	if pre.fetched, pre.outcome, err = im.dereference(ctx, act); err != nil {
		return pre, err
	}
	pre.quote = im.verifyQuote(ctx, act) // quote.go
	switch {
	case act.Type == "Follow":
		if _, err := im.st.ActorByURI(ctx, act.ObjectID); err != nil {
			return pre, nil // not a local actor: nothing to resolve
		}
		a, err := im.cfg.Resolver.Actor(ctx, act.Actor)
		switch {
		case err == nil:
			pre.follower = a
		case errors.Is(err, activitypub.ErrGone) || errors.Is(err, activitypub.ErrNotFound):
		default:
			return pre, fmt.Errorf("resolve follower %s: %w", act.Actor, err)
		}
	case act.Type == "Move": // move.go
		if pre.outcome, err = im.verifyMove(ctx, act); err != nil {
			return pre, err
		}
	case act.Type == "Update" && act.Object != nil && act.Object.ID == act.Actor && actorTypes[act.Object.Type]:
		if r, ok := im.cfg.Resolver.(refresher); ok {
			if _, err := r.Refresh(ctx, act.Actor); err != nil {
				im.log.InfoContext(ctx, "inbox: refresh of an updated actor failed", "actor", act.Actor, "err", err)
			}
		}
	}
	return pre, nil
}

// apply applies act, received at receivedAt, in tx and returns its outcome.
// Only failures worth a retry (the database) are returned as errors; what
// the store refuses is an outcome.
func (im *Importer) apply(ctx context.Context, tx *sql.Tx, eventID string, receivedAt time.Time, act *activitypub.Activity, pre prepared) (importOutcome, error) {
	st := im.st
	inner := act.Object
	innerType := ""
	if inner != nil {
		innerType = inner.Type
	}
	if outcome, ok, err := im.applyLocal(ctx, tx, act); ok || err != nil {
		return outcome, err
	}
	if outcome, ok, err := im.relayImport(ctx, tx, eventID, receivedAt, act); ok || err != nil {
		return outcome, err
	}
	if outcome, ok, err := im.tombstoned(ctx, tx, act, pre); ok || err != nil { // tombstone.go
		return outcome, err
	}
	if pre.outcome != (importOutcome{}) {
		return pre.outcome, nil
	}
	if pre.fetched != nil {
		return im.storeFetched(ctx, tx, pre.fetched)
	}
	if isEmojiReaction(act) { // an EmojiReact, or a Like with an emoji: reaction.go
		return im.react(ctx, tx, act)
	}
	switch act.Type {
	case "Follow":
		local, err := st.ActorByURITx(ctx, tx, act.ObjectID)
		if err != nil {
			return refusal(err, outcomeOf(OutcomeIgnored))
		}
		if blocked, err := st.BlocksTx(ctx, tx, local.ID, act.Actor); err != nil || blocked {
			if store.ErrorCode(err) == store.ENOTFOUND {
				return outcomeOf(OutcomeIgnored), nil // deleted meanwhile
			}
			return refusal(err, refused("blocked"))
		}
		if pre.follower == nil {
			return outcomeOf(OutcomeIgnored), nil
		}
		state := store.StateAccepted
		if local.ManuallyApprovesFollowers {
			state = store.StatePending
		}
		if _, err := st.AddFollowerTx(ctx, tx, store.Follower{
			ActorID: local.ID, URI: act.Actor, Inbox: pre.follower.Inbox, SharedInbox: pre.follower.SharedInbox,
			FollowActivityID: act.ID, State: state,
		}); err != nil {
			return refusal(err, importOutcome{})
		}
		if state == store.StatePending {
			return outcomeOf(OutcomePending), nil
		}
		if _, _, err := st.EnqueueEventActivityTx(ctx, tx, AcceptEventID(eventID), receivedAt, local, "Accept",
			store.FollowObject(act.ID, act.Actor, local.URI), []string{act.Actor}, nil); err != nil {
			return refusal(err, importOutcome{})
		}
		return outcomeOf(OutcomeFollowed), nil

	case "Undo":
		return im.undo(ctx, tx, act, inner, innerType)

	case "QuoteRequest":
		return im.quoteRequest(ctx, tx, eventID, act) // quote.go

	case "Accept", "Reject":
		if outcome, ok, err := im.quoteAnswer(ctx, tx, eventID, act); ok || err != nil { // quote.go
			return outcome, err
		}
		if innerType != "" && innerType != "Follow" {
			return outcomeOf(OutcomeIgnored), nil
		}
		ref := store.FollowingRef{Target: act.Actor, FollowActivityID: act.ObjectID}
		if inner != nil && inner.Actor != "" {
			if _, err := st.ActorByURITx(ctx, tx, inner.Actor); err == nil {
				ref.LocalActor = inner.Actor
			}
		}
		if ref.FollowActivityID != "" && !st.URIs().IsLocal(ref.FollowActivityID) {
			ref.FollowActivityID = "" // the peer's own id for our Follow: match by local actor
		}
		if ref.FollowActivityID == "" && ref.LocalActor == "" {
			return outcomeOf(OutcomeNoMatch), nil
		}
		state := store.StateAccepted
		if act.Type == "Reject" {
			state = store.StateRejected
		}
		n, err := st.SetFollowingStateTx(ctx, tx, ref, state)
		if err != nil {
			return refusal(err, importOutcome{})
		}
		if n == 0 {
			return outcomeOf(OutcomeNoMatch), nil
		}
		return outcomeOf(OutcomeAnswered), nil

	case "Create", "Update":
		if inner == nil {
			return outcomeOf(OutcomeUnsupported), nil // an object by reference would need a fetch
		}
		if actorTypes[innerType] {
			return outcomeOf(OutcomeActorUpdate), nil
		}
		if !storedType(innerType) {
			return outcomeOf(OutcomeUnsupported), nil
		}
		if isVote(act, inner, st.URIs()) {
			if outcome, ok, err := im.vote(ctx, tx, act, inner); ok || err != nil {
				return outcome, err
			}
		}
		written, err := st.UpsertRemoteObjectTx(ctx, tx, store.RemoteObject{
			URI: inner.ID, Type: innerType, AttributedTo: act.Actor, Content: inner.Content, Summary: inner.Summary,
			InReplyTo: inner.InReplyTo, To: inner.To, CC: inner.Cc, Published: inner.Published,
			Updated: inner.Updated, Document: inner.Raw,
		})
		if err != nil {
			return refusal(err, importOutcome{})
		}
		if !written {
			return outcomeOf(OutcomeStale), nil
		}
		return outcomeOf(OutcomeStored), nil

	case "Delete":
		if isActorDelete(act) {
			if _, err := st.DeleteActorContentTx(ctx, tx, act.Actor); err != nil {
				return refusal(err, importOutcome{})
			}
			return outcomeOf(OutcomeActorGone), nil
		}
		if revoked, err := st.RevokeAuthorizationTx(ctx, tx, eventID, act.ObjectID, act.Actor); err != nil || revoked { // quote.go
			if err != nil {
				return refusal(err, importOutcome{})
			}
			return outcomeOf(OutcomeQuoteRevoked), nil
		}
		changed, err := st.DeleteRemoteObjectTx(ctx, tx, act.ObjectID, act.Actor, im.cfg.TombstoneLimit)
		if err != nil {
			return refusal(err, importOutcome{})
		}
		if !changed {
			return outcomeOf(OutcomeNoMatch), nil
		}
		return outcomeOf(OutcomeDeleted), nil

	case "Like", "Announce":
		o, err := st.ObjectByURITx(ctx, tx, act.ObjectID)
		if err != nil {
			return refusal(err, outcomeOf(OutcomeIgnored))
		}
		if !o.Local() || o.Deleted() {
			return outcomeOf(OutcomeIgnored), nil
		}
		// The activity type is the reaction type: store.ReactionLike or
		// store.ReactionAnnounce.
		added, err := st.AddReactionTx(ctx, tx, store.Reaction{
			ActivityURI: act.ID, Type: act.Type, ActorURI: act.Actor, ObjectURI: o.URI,
		})
		if err != nil {
			return refusal(err, importOutcome{})
		}
		if !added {
			return outcomeOf(OutcomeNoMatch), nil
		}
		return outcomeOf(OutcomeCounted), nil

	case "Move":
		return im.move(ctx, tx, eventID, receivedAt, act) // verified in prepare: move.go

	case "Block":
		local, err := st.ActorByURITx(ctx, tx, act.ObjectID)
		if err != nil {
			return refusal(err, outcomeOf(OutcomeIgnored))
		}
		if _, err := st.AddIncomingBlockTx(ctx, tx, local.ID, act.Actor, act.ID); err != nil {
			return refusal(err, importOutcome{})
		}
		return outcomeOf(OutcomeBlocked), nil
	}
	return outcomeOf(OutcomeUnsupported), nil
}

// undo applies an Undo whose embedded activity is inner (nil when the Undo
// names it by id only).
func (im *Importer) undo(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, inner *activitypub.Object, innerType string) (importOutcome, error) {
	st := im.st
	innerID := act.ObjectID
	if outcome, ok, err := im.undoEmoji(ctx, tx, act, inner, innerType); ok || err != nil { // reaction.go
		return outcome, err
	}
	switch innerType {
	case "Follow":
		if local, err := st.ActorByURITx(ctx, tx, inner.ObjectID); err == nil {
			removed, err := st.RemoveFollowerTx(ctx, tx, local.ID, act.Actor)
			return removedOutcome(removed, err, outcomeOf(OutcomeUnfollowed))
		}
		if innerID == "" {
			return outcomeOf(OutcomeNoMatch), nil
		}
		removed, err := st.RemoveFollowByActivityTx(ctx, tx, act.Actor, innerID)
		return removedOutcome(removed, err, outcomeOf(OutcomeUnfollowed))
	case "Like", "Announce":
		// innerType is the reaction type, as in apply.
		removed, err := st.RemoveReactionTx(ctx, tx, store.Reaction{
			ActivityURI: innerID, Type: innerType, ActorURI: act.Actor, ObjectURI: inner.ObjectID,
		})
		return removedOutcome(removed, err, outcomeOf(OutcomeUndone))
	case "Block":
		local, err := st.ActorByURITx(ctx, tx, inner.ObjectID)
		if err != nil {
			return refusal(err, outcomeOf(OutcomeIgnored))
		}
		removed, err := st.RemoveIncomingBlockTx(ctx, tx, local.ID, act.Actor)
		return removedOutcome(removed, err, outcomeOf(OutcomeUndone))
	case "":
		// By id only: a reaction or a Follow of this actor with that id.
		if innerID == "" {
			return outcomeOf(OutcomeNoMatch), nil
		}
		removed, err := st.RemoveReactionTx(ctx, tx, store.Reaction{ActivityURI: innerID, ActorURI: act.Actor})
		if err != nil || removed {
			return removedOutcome(removed, err, outcomeOf(OutcomeUndone))
		}
		removed, err = st.RemoveFollowByActivityTx(ctx, tx, act.Actor, innerID)
		return removedOutcome(removed, err, outcomeOf(OutcomeUnfollowed))
	}
	return outcomeOf(OutcomeUnsupported), nil
}

// AcceptEventID is the outbox event id of the Accept answering the Follow
// imported by the inbound event eventID: outbox.ChildID(eventID, "accept").
func AcceptEventID(eventID string) string { return outbox.ChildID(eventID, "accept") }

func removedOutcome(removed bool, err error, outcome importOutcome) (importOutcome, error) {
	if err != nil {
		return refusal(err, importOutcome{})
	}
	if !removed {
		return outcomeOf(OutcomeNoMatch), nil
	}
	return outcome, nil
}

// refusal turns a store error into an outcome: a database failure is
// returned for a retry; anything the store refuses (not found, forbidden,
// invalid) becomes notFound when given and the error is ENOTFOUND, else
// a refusal with the store's message. A nil err gives notFound.
func refusal(err error, notFound importOutcome) (importOutcome, error) {
	if err == nil {
		return notFound, nil
	}
	switch store.ErrorCode(err) {
	case store.EINTERNAL:
		return importOutcome{}, err
	case store.ENOTFOUND:
		if notFound != (importOutcome{}) {
			return notFound, nil
		}
	}
	return refused(store.ErrorMessage(err)), nil
}
