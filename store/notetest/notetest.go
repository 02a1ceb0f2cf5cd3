// Package notetest publishes notes for tests the way production does: as
// the object of a client's Create or Update, through store.CreateObject and
// store.UpdateObject, the path of the client-to-server outbox. A test that
// needs a local note to deliver, reply to or count makes it here, so it
// exercises the document, ids and audience that production stores.
package notetest

import (
	"context"

	"github.com/courier-ap/courier/store"
)

// Input is a note as a client posts it.
type Input struct {
	// Content is the note's HTML content.
	Content string
	// Summary is the content warning, if any.
	Summary string
	// Sensitive marks the note sensitive.
	Sensitive bool
	// InReplyTo is the id of the object replied to, if any. Update keeps
	// the note's own.
	InReplyTo string
	// To and CC address the note (see store.ObjectInput). Update adds them
	// to the note's audience and keeps the rest.
	To, CC []string
}

// Object returns the store.ObjectInput of the Note in describes, as the
// outbox builds it from the note a client posts (to and cc, which the store
// sets over a client's, only in To and CC).
func (in Input) Object() store.ObjectInput {
	props := map[string]any{"type": "Note", "content": in.Content}
	if in.Summary != "" {
		props["summary"] = in.Summary
	}
	if in.Sensitive {
		props["sensitive"] = true
	}
	if in.InReplyTo != "" {
		props["inReplyTo"] = in.InReplyTo
	}
	return store.ObjectInput{
		Type: "Note", Properties: props, Content: in.Content, Summary: in.Summary,
		InReplyTo: in.InReplyTo, To: in.To, CC: in.CC,
	}
}

// Create publishes a new note by actor (store.CreateObject).
func Create(ctx context.Context, st *store.Store, actor *store.Actor, in Input) (*store.Activity, *store.Object, error) {
	return st.CreateObject(ctx, actor, in.Object())
}

// Update replaces the content, summary and sensitivity of actor's own note
// uri (store.UpdateObject).
func Update(ctx context.Context, st *store.Store, actor *store.Actor, uri string, in Input) (*store.Activity, *store.Object, error) {
	return st.UpdateObject(ctx, actor, uri, in.Object())
}
