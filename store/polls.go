package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
)

// EventPollUpdate is the outbox event type of a poll's new counts to
// federate: its payload is a PollUpdate. A vote enqueues one for the end of
// its minute, with an id derived from the poll and the minute, so a poll's
// votes in one minute make one Update.
const EventPollUpdate = "poll.update"

// PollUpdateDelay is how long a poll's counts wait before they are
// federated: at most one Update a minute per poll.
const PollUpdateDelay = time.Minute

// PollUpdate is the payload of an EventPollUpdate event.
type PollUpdate struct {
	// Question is the local Question's id.
	Question string `json:"question"`
}

// Vote is a remote actor's vote on a local Question: a Create of a Note
// whose name is the option and whose inReplyTo is the Question.
type Vote struct {
	Question    string
	Voter       string
	Option      string
	ActivityURI string
	At          time.Time
}

// pollOptions returns the option names of a Question's document and
// whether it allows one option per voter (oneOf), and when it closes (zero:
// never; "closed" or a past endTime).
func pollOptions(doc json.RawMessage) (names map[string]bool, oneOf bool, closes time.Time) {
	var d struct {
		OneOf   []struct{ Name string } `json:"oneOf"`
		AnyOf   []struct{ Name string } `json:"anyOf"`
		EndTime string                  `json:"endTime"`
		Closed  any                     `json:"closed"`
	}
	names = map[string]bool{}
	if json.Unmarshal(doc, &d) != nil {
		return names, false, time.Time{}
	}
	opts := d.AnyOf
	if len(d.OneOf) > 0 {
		opts, oneOf = d.OneOf, true
	}
	for _, o := range opts {
		names[o.Name] = true
	}
	if t, err := time.Parse(time.RFC3339, d.EndTime); err == nil {
		closes = t
	}
	switch c := d.Closed.(type) {
	case string:
		if t, err := time.Parse(time.RFC3339, c); err == nil && (closes.IsZero() || t.Before(closes)) {
			closes = t
		}
	case bool:
		if c {
			closes = time.Unix(0, 0)
		}
	}
	return names, oneOf, closes
}

// ErrNotPoll is returned (wrapped) by VoteTx when v.Question is not a
// local Question: the Note is a reply, not a vote.
var ErrNotPoll = errors.New("store: not a local poll")

// VoteTx counts v in tx and schedules the poll's Update (EventPollUpdate,
// at most one a minute). A voter the poll is not for (pollAudienceTx) is
// refused (EFORBIDDEN). It reports whether the vote was counted: a vote for
// an option the poll does not have, on a closed or deleted poll, by its
// author, a second vote of a voter on a oneOf poll or the same option twice
// are not. When v.Question is not a local Question it returns ErrNotPoll.
func (s *Store) VoteTx(ctx context.Context, tx *sql.Tx, v Vote) (bool, error) {
	if !s.uris.IsLocal(v.Question) || v.Voter == "" || v.Option == "" {
		return false, ErrNotPoll
	}
	// Locked: a voter's two votes on a oneOf poll at once count once.
	o, err := s.objectForUpdate(ctx, tx, v.Question)
	if errors.Is(err, ErrNotFound) {
		return false, ErrNotPoll
	}
	if err != nil {
		return false, err
	}
	if !o.Local() || (o.Type != "Question" && !(o.Deleted() && o.FormerType == "Question")) {
		return false, ErrNotPoll
	}
	if o.Deleted() || o.AttributedTo == v.Voter {
		return false, nil
	}
	if ok, err := s.pollAudienceTx(ctx, tx, o, v.Voter); err != nil {
		return false, err
	} else if !ok {
		return false, Errorf(EFORBIDDEN, "the voter is not of the poll's audience")
	}
	names, oneOf, closes := pollOptions(o.Document)
	at := v.At
	if at.IsZero() {
		at = s.clock()
	}
	if !names[v.Option] || (!closes.IsZero() && !at.Before(closes)) {
		return false, nil
	}
	if oneOf {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM poll_votes WHERE object_id = ? AND voter_uri = ?`,
			o.RowID, v.Voter).Scan(&n); err != nil {
			return false, wrap("vote", err)
		}
		if n > 0 {
			return false, nil
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO poll_votes (object_id, voter_uri, option_name, activity_uri, created_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (object_id, voter_uri, option_name) DO NOTHING`,
		o.RowID, v.Voter, v.Option, v.ActivityURI, ms(s.clock()))
	if err != nil {
		return false, wrap("vote", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	// One Update per poll and minute: the event of this minute is made
	// once, due at the minute's end; later votes of the minute join it.
	now := s.clock()
	slot := now.Truncate(PollUpdateDelay).Add(PollUpdateDelay)
	payload, err := json.Marshal(PollUpdate{Question: o.URI})
	if err != nil {
		return false, wrap("vote", err)
	}
	if err := outbox.Enqueue(ctx, tx, outbox.Event{
		ID:   outbox.ChildID(o.URI, "poll-update "+strconv.FormatInt(slot.UnixMilli(), 10)),
		Type: EventPollUpdate, Payload: payload, OccurredAt: now, NotBefore: slot,
	}); err != nil {
		return false, wrap("vote", err)
	}
	return true, nil
}

// pollAudienceTx reports whether voter may vote on the local poll o: anyone
// on a public or unlisted poll; else an actor the poll addresses, or an
// accepted follower of its author when it addresses the author's
// followers.
func (s *Store) pollAudienceTx(ctx context.Context, tx *sql.Tx, o *Object, voter string) (bool, error) {
	if o.Visibility == VisibilityPublic || o.Visibility == VisibilityUnlisted {
		return true, nil
	}
	var name string
	if err := tx.QueryRowContext(ctx, `SELECT name FROM actors WHERE id = ?`, o.ActorID).Scan(&name); err != nil {
		return false, wrap("vote audience", err)
	}
	followers := false
	for _, a := range append(append([]string(nil), o.To...), o.CC...) {
		switch a {
		case voter:
			return true, nil
		case s.uris.Followers(name):
			followers = true
		}
	}
	if !followers {
		return false, nil
	}
	var n int
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM followers WHERE actor_id = ? AND follower_uri = ? AND state = 'accepted'`,
		o.ActorID, voter).Scan(&n)
	return n > 0, wrap("vote audience", err)
}

// PublishPollCounts stores the current counts of the local Question uri in
// its document and enqueues its Update to the poll's audience, in one
// transaction; eventID is the EventPollUpdate event's, from which the
// Update's id is derived, so running it twice sends one Update. A deleted
// or unknown poll is left alone.
func (s *Store) PublishPollCounts(ctx context.Context, eventID, uri string) error {
	o, err := s.ObjectByURI(ctx, uri)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !o.Local() || o.Deleted() || o.Type != "Question" {
		return nil
	}
	actor, err := s.ActorByID(ctx, o.ActorID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	ev := pendingEvent{ID: outbox.ChildID(eventID, "Update"), At: s.clock(), Context: ObjectContext(o.Context)}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		o, err := s.objectForUpdate(ctx, tx, uri)
		if err != nil || o.Deleted() {
			return err
		}
		counts, err := pollCountsTx(ctx, tx, o.RowID)
		if err != nil {
			return err
		}
		var doc map[string]any
		d := json.NewDecoder(bytes.NewReader(o.Document))
		d.UseNumber()
		if err := d.Decode(&doc); err != nil {
			return err
		}
		b, err := json.Marshal(withPollCounts(doc, counts))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE objects SET document = ?, modified_at = ? WHERE id = ?`,
			string(b), ms(ev.At), o.RowID); err != nil {
			return err
		}
		_, _, err = s.emitOnceTx(ctx, tx, ev, actor, "Update", json.RawMessage(b), o.To, o.CC)
		return err
	})
	return wrap("publish poll counts", err)
}

// CastVote records actor's vote for option on the poll question and
// enqueues it as the fediverse sends votes (Mastodon's shape: a Create of a
// Note whose name is the option and whose inReplyTo is the poll, without
// content, addressed to the poll's author), in one transaction. A vote on a
// local poll is counted here, under the rules of a remote vote (VoteTx);
// one that cannot count (an option the poll does not have, a closed poll,
// a second vote on a oneOf poll, the author's own) is EUNPROCESSABLE. A
// remote poll must be one courier has stored. The vote is not stored as
// a note of actor's.
func (s *Store) CastVote(ctx context.Context, actor *Actor, question, option string) (*Activity, error) {
	if !absoluteURL(question) {
		return nil, Errorf(EINVALID, "inReplyTo %q is not an absolute http(s) URL", question)
	}
	if option == "" {
		return nil, Errorf(EINVALID, "a vote needs the option's name")
	}
	ev := s.newEvent()
	var act *Activity
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		id := activitypub.ActivityID(s.uris.Base, ev.ID, "Create")
		var author string
		if s.uris.IsLocal(question) {
			counted, err := s.VoteTx(ctx, tx, Vote{Question: question, Voter: actor.URI, Option: option, ActivityURI: id, At: ev.At})
			if errors.Is(err, ErrNotPoll) {
				return Errorf(EUNPROCESSABLE, "%q is not a poll: a Note with a name and inReplyTo but no content is a vote", question)
			}
			if err != nil {
				return err
			}
			if !counted {
				return Errorf(EUNPROCESSABLE, "the vote for %q cannot count: the poll has no such option, is closed, or has your vote already", option)
			}
		}
		o, err := s.ObjectByURITx(ctx, tx, question)
		if errors.Is(err, ErrNotFound) {
			return Errorf(EUNPROCESSABLE, "%q is not a poll courier knows: a Note with a name and inReplyTo but no content is a vote", question)
		}
		if err != nil {
			return err
		}
		if o.Type != "Question" || o.Deleted() {
			return Errorf(EUNPROCESSABLE, "%q is not a poll: a Note with a name and inReplyTo but no content is a vote", question)
		}
		author = o.AttributedTo
		note := map[string]any{
			"id": id + "#vote", "type": "Note", "attributedTo": actor.URI, "name": option,
			"inReplyTo": question, "to": []string{author},
		}
		act, err = s.emitTx(ctx, tx, ev, actor, "Create", note, []string{author}, nil)
		return err
	})
	if err != nil {
		return nil, wrap("vote", err)
	}
	return act, nil
}
