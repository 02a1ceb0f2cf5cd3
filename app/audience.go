package app

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Imported is an inbound activity its import applied, as the recorder
// needs it.
type Imported struct {
	// Activity is the verified activity.
	Activity *activitypub.Activity
	// Follow is the state of the follower a Follow of a local actor stored
	// (store.StatePending or store.StateAccepted); "" when it stored none.
	Follow string
	// QuoteActor is the local actor a quote concerns (the quoted author,
	// or the quoter answered), and QuoteKind the notification it gets
	// (KindQuoteRequest, KindQuote, ...); empty when none.
	QuoteActor, QuoteKind string
}

// timelineTypes are the activities of a followed actor that fill its
// local followers' timelines (a remote Like is not news to them).
var timelineTypes = map[string]bool{
	"Create": true, "Announce": true, "Update": true, "Delete": true, "Move": true, "Undo": true,
	"Add": true, "Remove": true,
}

// maxLookups bounds the local ids one activity's audience looks up.
const maxLookups = 256

// kindRank orders kinds: an actor concerned twice keeps the higher.
var kindRank = map[string]int{
	"": 0, KindMove: 1, KindLike: 2, KindAnnounce: 2, KindReaction: 2, KindReply: 3, KindMention: 4,
	KindDirect: 5, KindFollow: 6, KindFollowRequest: 6,
	KindQuote: 3, KindQuoteUnapproved: 3, KindQuoteApproved: 6, KindQuoteRejected: 6, KindQuoteRevoked: 6, KindQuoteRequest: 6,
}

// concerned collects the local actors an activity concerns, each once with
// its highest kind, in the order found.
type concerned struct {
	order []int64
	byID  map[int64]*Item
}

func (c *concerned) add(a *store.Actor, kind string) {
	if it, ok := c.byID[a.ID]; ok {
		if kindRank[kind] > kindRank[it.Kind] {
			it.Kind = kind
		}
		return
	}
	c.order = append(c.order, a.ID)
	c.byID[a.ID] = &Item{ActorID: a.ID, ActorName: a.Name, Kind: kind}
}

// RecordActivityTx records imp in tx for every local actor it concerns
// but its own actor
// (RecordTx): those it is addressed to, those its object mentions, the
// authors of the local objects it replies or reacts to, the actor a Follow
// asks to follow, and the local followers of its actor (for what fills a
// timeline: Create, Announce, Update, Delete, Move, Undo, Add, Remove). An
// actor that blocks its sender is left out. It returns the items recorded.
func (r *Recorder) RecordActivityTx(ctx context.Context, tx *sql.Tx, imp Imported) ([]Item, error) {
	act := imp.Activity
	if act == nil || r.st == nil {
		return nil, nil
	}
	c := &concerned{byID: map[int64]*Item{}}
	if err := r.audience(ctx, tx, imp, c); err != nil {
		return nil, fmt.Errorf("app: audience of %s: %w", act.ID, err)
	}
	if len(c.order) == 0 {
		return nil, nil
	}
	doc, err := r.document(ctx, tx, act)
	if err != nil {
		return nil, fmt.Errorf("app: document of %s: %w", act.ID, err)
	}
	self, _ := r.st.URIs().ActorName(act.Actor) // a local sender is not its own audience
	items := make([]Item, 0, len(c.order))
	for _, id := range c.order {
		it := c.byID[id]
		if self != "" && it.ActorName == self {
			continue
		}
		blocked, err := r.st.BlocksReadTx(ctx, tx, id, act.Actor)
		if err != nil {
			return nil, fmt.Errorf("app: blocks of actor %d: %w", id, err)
		}
		if blocked {
			continue
		}
		it.ActivityURI, it.Type, it.Activity = act.ID, act.Type, doc
		items = append(items, *it)
	}
	if err := r.RecordTx(ctx, tx, items...); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(items, func(it Item) bool { return it.Seq == 0 }), nil
}

func (r *Recorder) audience(ctx context.Context, tx *sql.Tx, imp Imported, c *concerned) error {
	act := imp.Activity
	obj := act.Object
	uris := r.st.URIs()
	// Each local id is looked up once, and at most maxLookups of them: an
	// activity naming thousands of local ids costs no more than that.
	looked := map[string]*store.Actor{}
	local := func(uri string) (*store.Actor, error) {
		if !uris.IsLocal(uri) {
			return nil, nil
		}
		if a, ok := looked[uri]; ok || len(looked) >= maxLookups {
			return a, nil
		}
		a, err := r.st.ActorByURITx(ctx, tx, uri)
		if store.ErrorCode(err) == store.ENOTFOUND {
			a, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
		looked[uri] = a
		return a, nil
	}
	localObjectOwner := func(uri string) (*store.Actor, error) {
		if uri == "" || !uris.IsLocal(uri) {
			return nil, nil
		}
		o, err := r.st.ObjectByURITx(ctx, tx, uri)
		if store.ErrorCode(err) == store.ENOTFOUND {
			return nil, nil
		}
		if err != nil || !o.Local() || o.Deleted() {
			return nil, err
		}
		return local(o.AttributedTo)
	}

	// Addressed: the activity's addressing and its object's.
	addrs := addresses(act.To, act.Cc, act.Bto, act.Bcc, act.Audience)
	if obj != nil {
		addrs = append(addrs, addresses(obj.To, obj.Cc, obj.Bto, obj.Bcc, obj.Audience)...)
	}
	direct := act.Type == "Create" && obj != nil && isDirect(addrs)
	for _, u := range addrs {
		a, err := local(u)
		if err != nil {
			return err
		}
		if a != nil {
			kind := ""
			if direct {
				kind = KindDirect
			}
			c.add(a, kind)
		}
	}
	// Mentions and replies of a new object.
	if obj != nil && (act.Type == "Create" || act.Type == "Update") {
		for _, t := range obj.Tag {
			if t.Type != "Mention" || t.Href == "" {
				continue
			}
			a, err := local(t.Href)
			if err != nil {
				return err
			}
			if a != nil {
				c.add(a, notifying(act.Type, KindMention))
			}
		}
		// The author of what it replies to, when the reply is public or
		// unlisted (a followers-only or direct reply concerns those it
		// names only).
		if isPublic(addrs) {
			a, err := localObjectOwner(obj.InReplyTo)
			if err != nil {
				return err
			}
			if a != nil {
				c.add(a, notifying(act.Type, KindReply))
			}
		}
	}
	if imp.QuoteActor != "" && imp.QuoteKind != "" {
		a, err := local(imp.QuoteActor)
		if err != nil {
			return err
		}
		if a != nil {
			c.add(a, imp.QuoteKind)
		}
	}
	if kind := reactionKind(act.Type, act.Raw); kind != "" {
		a, err := localObjectOwner(act.ObjectID)
		if err != nil {
			return err
		}
		if a != nil {
			c.add(a, kind)
		}
	}
	switch act.Type {
	case "Follow":
		a, err := local(act.ObjectID)
		if err != nil {
			return err
		}
		switch {
		case a == nil:
		case imp.Follow == store.StatePending:
			c.add(a, KindFollowRequest)
		case imp.Follow == store.StateAccepted:
			c.add(a, KindFollow)
		}
	case "Undo":
		// An Undo of a Follow of the actor, or of a reaction to its object.
		if obj != nil {
			switch obj.Type {
			case "Follow":
				a, err := local(obj.ObjectID)
				if err != nil {
					return err
				}
				if a != nil {
					c.add(a, "")
				}
			default:
				if reactionKind(obj.Type, obj.Raw) == "" {
					break
				}
				a, err := localObjectOwner(obj.ObjectID)
				if err != nil {
					return err
				}
				if a != nil {
					c.add(a, "")
				}
			}
		}
	}
	// The local followers of its actor, through the shared inbox.
	if timelineTypes[act.Type] {
		kind := ""
		if act.Type == "Move" {
			kind = KindMove
		}
		fs, err := r.st.LocalFollowersOfTx(ctx, tx, act.Actor)
		if err != nil {
			return err
		}
		for _, f := range fs {
			c.add(&store.Actor{ID: f.ActorID, Name: f.Name}, kind)
		}
	}
	return nil
}

// notifying is kind for a Create; an Update of an object already notified
// only fills the timeline.
func notifying(actType, kind string) string {
	if actType == "Create" {
		return kind
	}
	return ""
}

// reactionKind is the kind of a reaction of type typ and document raw, as
// activitypub.ReactionOf decides it (the import counts it by the same
// decision); "" for what is no reaction.
func reactionKind(typ string, raw json.RawMessage) string {
	switch activitypub.ReactionOf(typ, raw).Kind {
	case activitypub.ReactionAnnounce:
		return KindAnnounce
	case activitypub.ReactionLike:
		return KindLike
	case activitypub.ReactionEmoji, activitypub.ReactionDislike:
		return KindReaction
	}
	return ""
}

func addresses(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// isDirect reports whether addrs address neither the public nor a
// followers collection: a direct message.
func isDirect(addrs []string) bool {
	for _, u := range addrs {
		if activitypub.IsPublic(u) || strings.HasSuffix(u, "/followers") {
			return false
		}
	}
	return len(addrs) > 0
}

// isPublic reports whether addrs address the public.
func isPublic(addrs []string) bool {
	return slices.ContainsFunc(addrs, activitypub.IsPublic)
}

// document is the activity as received, with its object embedded as stored
// when it came by id only and is stored here.
func (r *Recorder) document(ctx context.Context, tx *sql.Tx, act *activitypub.Activity) (json.RawMessage, error) {
	if act.Object != nil || act.ObjectID == "" {
		return act.Raw, nil
	}
	o, err := r.st.ObjectByURITx(ctx, tx, act.ObjectID)
	if store.ErrorCode(err) == store.ENOTFOUND {
		return act.Raw, nil
	}
	if err != nil {
		return nil, err
	}
	if len(o.Document) == 0 {
		return act.Raw, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(act.Raw, &m); err != nil {
		return act.Raw, nil
	}
	m["object"] = o.Document
	return marshal(m)
}

// marshal encodes v without escaping HTML, as ActivityPub documents carry
// HTML content.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
