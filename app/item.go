// Package app is courier's application surface: what a local actor's
// application reads of what arrives (the inbox view, its live stream) and
// the hooks that run in the transaction that records it; the outbox view's
// live stream too. Its routes answer through package httpedge (statuses,
// error bodies, the bearer token and its throttle, cursors), as server's do.
package app

import (
	"context"
	"database/sql"
	"encoding/json"
)

// Item is one entry of a local actor's inbox view: an activity that
// concerns the actor, recorded in the transaction that imported it.
type Item struct {
	ActorID   int64  // the local actor whose inbox view holds it
	ActorName string // that actor's preferredUsername
	// Seq is the actor's durable sequence number of the item, assigned
	// when it is recorded; strictly increasing per actor.
	Seq         int64
	ActivityURI string // the activity's id
	Type        string // the activity's type: Create, Follow, Like, ...
	// Kind says why it concerns the actor when it is a notification
	// (mention, reply, direct, follow, follow_request, like, announce,
	// reaction, move, ...); empty for what only fills the actor's timeline.
	Kind string
	// Activity is the activity as received (verified), with its object
	// embedded as stored.
	Activity json.RawMessage
}

// Notification reports whether the item concerns the actor itself.
func (it Item) Notification() bool { return it.Kind != "" }

// Hook runs inside the transaction that records an item, after the item
// has its Seq; an error rolls the whole import back.
type Hook func(ctx context.Context, tx *sql.Tx, it Item) error
