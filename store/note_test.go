package store

import "context"

// noteInput is a note as a client posts it, for this package's tests:
// what package notetest is to the tests of the others, which this package
// cannot import. createNote and updateNote publish it as production does,
// through CreateObject and UpdateObject.
type noteInput struct {
	Content, Summary string
	Sensitive        bool
	InReplyTo        string
	To, CC           []string
}

// object returns the ObjectInput of the Note in describes, as the
// client-to-server outbox builds it.
func (in noteInput) object() ObjectInput {
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
	return ObjectInput{
		Type: "Note", Properties: props, Content: in.Content, Summary: in.Summary,
		InReplyTo: in.InReplyTo, To: in.To, CC: in.CC,
	}
}

func createNote(ctx context.Context, s *Store, actor *Actor, in noteInput) (*Activity, *Object, error) {
	return s.CreateObject(ctx, actor, in.object())
}

func updateNote(ctx context.Context, s *Store, actor *Actor, uri string, in noteInput) (*Activity, *Object, error) {
	return s.UpdateObject(ctx, actor, uri, in.object())
}
