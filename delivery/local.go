package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Local recipients. An activity addressed to a local actor (by name, or
// through a followers collection that holds one) is not POSTed to courier
// itself: the fan-out has the inbox record it as a verified inbound
// activity and enqueue its import event, in the fan-out's transaction
// (Config.LocalInbox). The inbox's importer then imports it as it would a
// remote actor's (a Follow makes a follower and its Accept, or a pending
// request; an Accept marks the follow accepted; ...). The event's id is
// the inbox's, derived from the activity id, so a fan-out run again, or
// the same activity reaching the inbox by HTTP, records and imports it
// once.

// LocalInbox records an activity of a local actor for the local actors it
// reaches, as the inbox records a verified inbound one. inbox.Local
// implements it.
type LocalInbox interface {
	// RecordTx records act, its bytes doc, for the inbox box (a local
	// actor's name, or "" for the shared inbox) at at, and enqueues its
	// import event, in tx; an activity recorded before records and
	// enqueues nothing.
	RecordTx(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, doc []byte, box string, at time.Time) error
}

// errNoLocalInbox fails the fan-out of an activity with local recipients
// when the Service has no Config.LocalInbox.
var errNoLocalInbox = errors.New("delivery: local recipients, and no Config.LocalInbox to record the activity for them")

// localAudience is what the fan-out found of local recipients.
type localAudience struct {
	// names are the local actors named or behind a followers collection,
	// other than the activity's actor.
	names map[string]bool
}

func (l *localAudience) add(name string) {
	if l.names == nil {
		l.names = map[string]bool{}
	}
	l.names[name] = true
}

// inbox is the inbox the record is for: the one local recipient's name,
// or "" (the shared inbox) for several.
func (l *localAudience) inbox() string {
	if len(l.names) != 1 {
		return ""
	}
	for n := range l.names {
		return n
	}
	return ""
}

// recordLocalTx has the activity act (its bytes doc) recorded for its
// local recipients l and its import enqueued, in tx (LocalInbox).
func (s *Service) recordLocalTx(ctx context.Context, tx *sql.Tx, act *activitypub.Activity, doc []byte, l localAudience, at time.Time) error {
	if s.cfg.LocalInbox == nil {
		return errNoLocalInbox
	}
	if err := s.cfg.LocalInbox.RecordTx(ctx, tx, act, doc, l.inbox(), at); err != nil {
		return fmt.Errorf("record for local recipients: %w", err)
	}
	return nil
}

// localName returns the name of the local actor whose id or inbox is uri
// ({base}/users/NAME or {base}/users/NAME/inbox), or "".
func (s *Service) localName(uri string) string {
	if name, ok := s.uris.ActorName(uri); ok {
		return name
	}
	if rest, ok := strings.CutSuffix(uri, "/inbox"); ok {
		if name, ok := s.uris.ActorName(rest); ok {
			return name
		}
	}
	return ""
}

// namedLocal adds the local actor r to the local recipients when it is
// one (not deleted); another local id (a collection, an object) is no
// recipient.
func (s *Service) namedLocal(ctx context.Context, r string, addLocal func(string)) error {
	if _, ok := s.uris.ActorName(r); !ok {
		return nil
	}
	_, err := s.store.ActorByName(ctx, s.localName(r))
	switch {
	case err == nil:
		addLocal(r)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("delivery: local recipient %s: %w", r, err)
	}
	return nil
}
