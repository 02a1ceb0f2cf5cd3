package delivery

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Post is the payload of an EventPost event: one activity for one inbox.
// The activity's bytes are not copied into every delivery: the POST's body
// is the activity exactly as the fan-out stored it (activities.document),
// read once per process and activity.
type Post struct {
	// Actor is the local actor whose key signs the POST.
	Actor string `json:"actor"`
	// ActivityID is the activity's id.
	ActivityID string `json:"activity_id"`
	// Inbox is the inbox URL POSTed to.
	Inbox string `json:"inbox"`
	// Recipient is the one remote actor behind a personal inbox (empty for
	// a shared inbox): a 410 from the inbox removes it as a follower.
	Recipient string `json:"recipient,omitempty"`
	// Forward marks the forward of an inbound activity (see forward): its
	// body is the activity's bytes as received (store.ForwardDocument),
	// not a local activity's.
	Forward bool `json:"forward,omitempty"`
}

// target is one inbox of an activity's audience.
type target struct {
	inbox     string
	host      string
	recipient string // a remote actor behind a personal inbox
	several   bool   // more than one remote actor is behind it
	shared    bool
}

// fanout handles an activitypub.EventOutgoing event: it checks the
// activity, stores it, and enqueues one EventPost per target inbox in one
// transaction (ids outbox.ChildID(event, inbox), conflict-ignored).
func (s *Service) fanout(ctx context.Context, ev outbox.Event) error {
	var out activitypub.Outgoing
	if err := json.Unmarshal(ev.Payload, &out); err != nil || len(out.Activity) == 0 {
		return outbox.Permanent(fmt.Errorf("%w: fan-out %s: %v", ErrPayload, ev.ID, err))
	}
	act, err := activitypub.ParseActivity(out.Activity)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("%w: fan-out %s: %w", ErrPayload, ev.ID, err))
	}
	if want := activitypub.ActivityID(s.cfg.BaseURL, ev.ID, act.Type); act.ID != want {
		return outbox.Permanent(fmt.Errorf("%w: event %s carries %s, want %s", ErrNotDeterministic, ev.ID, act.ID, want))
	}
	if act.Actor != out.Actor {
		return outbox.Permanent(fmt.Errorf("%w: event %s: activity actor %s is not the event's %s",
			ErrPayload, ev.ID, act.Actor, out.Actor))
	}
	if err := s.fanoutGate(ctx, ev, act); err != nil {
		return err
	}
	actor, err := s.store.ActorByURI(ctx, out.Actor)
	if errors.Is(err, store.ErrNotFound) {
		return outbox.Permanent(fmt.Errorf("%w: %s", ErrNotLocal, out.Actor))
	}
	if err != nil {
		return fmt.Errorf("delivery: fan-out %s: %w", ev.ID, err)
	}
	targets, local, err := s.audience(ctx, ev.ID, actor, act)
	if err != nil {
		return err
	}
	events := make([]outbox.Event, 0, len(targets))
	lane := outbox.LaneInteractive
	if len(targets) > s.cfg.BulkFanout {
		lane = outbox.LaneBulk
	}
	for _, t := range targets {
		p := Post{Actor: out.Actor, ActivityID: act.ID, Inbox: t.inbox}
		if !t.shared && !t.several {
			p.Recipient = t.recipient
		}
		payload, err := json.Marshal(p)
		if err != nil {
			return outbox.Permanent(fmt.Errorf("delivery: fan-out %s: encode: %w", ev.ID, err))
		}
		events = append(events, outbox.Event{
			ID: outbox.ChildID(ev.ID, t.inbox), Type: EventPost, Target: t.host,
			Payload: payload, OccurredAt: ev.OccurredAt, Lane: lane,
		})
	}
	stored := &store.Activity{
		URI: act.ID, ActorURI: out.Actor, ActorID: actor.ID, Type: act.Type, ObjectURI: act.ObjectID,
		Document: out.Activity, Published: act.Published, EventID: ev.ID,
		Public: slices.ContainsFunc(act.To, activitypub.IsPublic) || slices.ContainsFunc(act.Cc, activitypub.IsPublic),
	}
	now := s.now().UnixMilli()
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		if err := s.store.UpsertDeliveredActivityTx(ctx, tx, stored); err != nil {
			return err
		}
		if len(local.names) > 0 {
			if err := s.recordLocalTx(ctx, tx, act, out.Activity, local, ev.OccurredAt); err != nil {
				return err
			}
		}
		if len(events) == 0 {
			return nil
		}
		return s.enqueueDeliveriesTx(ctx, tx, ev.ID, act, targets, events, now)
	})
	if err != nil {
		return fmt.Errorf("delivery: fan-out %s: %w", ev.ID, err)
	}
	s.log.DebugContext(ctx, "delivery: fanned out", "event_id", ev.ID, "activity_id", act.ID,
		"inboxes", len(events), "local_recipients", len(local.names))
	return nil
}

// enqueueDeliveriesTx records, in tx, the deliveries events of act to
// targets (one each, in step), made by event parentID at now
// (delivery_targets, with the order columns of orderOfEventTx: the key of
// what act is about and the parent's row id, the order the activities were
// written in), and enqueues them. Fan-outs and forwards both end with it.
func (s *Service) enqueueDeliveriesTx(ctx context.Context, tx *sql.Tx, parentID string, act *activitypub.Activity,
	targets []target, events []outbox.Event, now int64) error {
	okey, oseq, okind, err := s.orderOfEventTx(ctx, tx, parentID, act)
	if err != nil {
		return err
	}
	rows := make([][]any, len(targets))
	for i, t := range targets {
		rows[i] = []any{events[i].ID, parentID, act.ID, t.inbox, t.host, now, okey, oseq, okind}
	}
	if err := insertRows(ctx, tx, `INSERT INTO delivery_targets
		(event_id, parent_event_id, activity_id, inbox, host, created_at, order_key, order_seq, order_kind) VALUES `,
		` ON CONFLICT (event_id) DO NOTHING`, rows); err != nil {
		return err
	}
	return outbox.Enqueue(ctx, tx, events...)
}

// orderOfEventTx returns, in tx, the order columns of the deliveries that
// event eventID of act makes (order.go): the key of what act is about, the
// event row's id (the order the activities were written in) and the kind
// (create, update or none); all nil when act has no key, or its event has
// no row here.
func (s *Service) orderOfEventTx(ctx context.Context, tx *sql.Tx, eventID string, act *activitypub.Activity) (okey, oseq, okind any, err error) {
	key, kind := activitypub.OrderKey(act)
	if key == "" || s.cfg.unordered {
		return nil, nil, nil, nil
	}
	var seq int64
	err = tx.QueryRowContext(ctx, `SELECT id FROM event_queue WHERE event_id = ?`, eventID).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil, nil, nil
	case err != nil:
		return nil, nil, nil, err
	}
	okey, oseq = key, seq
	if kind != "" {
		okind = kind
	}
	return okey, oseq, okind, nil
}

// audience resolves the activity's to, cc, bto, bcc and audience to target
// inboxes, interleaved by host, and the local actors among its recipients
// (reached without HTTP: recordLocalTx). A named recipient whose host name
// does not exist (NXDOMAIN) past NameNotFoundAttempts is left out; when
// nothing is left to deliver to, remote or local, the fan-out fails for good
// (dead-lettered, where the operator sees it and may retry it) instead of
// succeeding with nothing.
func (s *Service) audience(ctx context.Context, eventID string, actor *store.Actor, act *activitypub.Activity) ([]target, localAudience, error) {
	followers := s.uris.Followers(actor.Name)
	self := strings.ToLower(s.uris.Host())
	byInbox := map[string]*target{}
	var local localAudience
	addLocal := func(uri string) {
		if name := s.localName(uri); name != "" && name != actor.Name {
			local.add(name)
		}
	}
	// skipped are the inboxes not POSTed to. An inbox is parsed once,
	// however many followers share it (a big instance's shared inbox
	// stands for thousands).
	skipped := map[string]bool{}
	add := func(inbox, recipient string, shared, several bool) {
		t := byInbox[inbox]
		if t == nil {
			if skipped[inbox] {
				return
			}
			host, ok := inboxHost(inbox)
			if !ok {
				skipped[inbox] = true
				s.log.InfoContext(ctx, "delivery: skipping an inbox that is not an http(s) URL",
					"activity_id", act.ID, "inbox", activitypub.RedactURL(inbox))
				return
			}
			if s.uris.IsLocal(inbox) || host == self {
				// Our own actors are not POSTed over HTTP: the
				// activity is imported for them (recordLocalTx).
				addLocal(inbox)
				return
			}
			t = &target{inbox: inbox, host: host}
			byInbox[inbox] = t
		}
		t.shared = t.shared || shared
		t.several = t.several || several
		switch {
		case t.recipient == "":
			t.recipient = recipient
		case recipient != "" && recipient != t.recipient:
			t.several = true
		}
	}
	var unknown []error
	named := func(r string) error {
		err := s.named(ctx, eventID, actor, act, r, add)
		var sk *skippedError
		if errors.As(err, &sk) {
			s.log.InfoContext(ctx, "delivery: skipping a recipient that cannot be resolved",
				"activity_id", act.ID, "recipient", r, "reason", sk.why, "err", sk.err)
			if act.Type == "Follow" {
				// A Follow reaches its object or nobody: given up for
				// good below, as a dead delivery.
				unknown = append(unknown, err)
			}
			return nil
		}
		var nf *nameNotFoundError
		if errors.As(err, &nf) {
			s.log.WarnContext(ctx, "delivery: skipping a recipient whose host name does not exist",
				"activity_id", act.ID, "recipient", r, "attempt", outbox.Attempt(ctx), "err", nf.err)
			unknown = append(unknown, err)
			return nil
		}
		return err
	}
	seen := map[string]bool{}
	for _, list := range [][]string{act.To, act.Cc, act.Bto, act.Bcc, act.Audience} {
		for _, r := range list {
			if r == "" || seen[r] || activitypub.IsPublic(r) {
				continue
			}
			seen[r] = true
			switch {
			case r == followers:
				boxes, err := s.store.DeliveryInboxes(ctx, actor.ID)
				if err != nil {
					return nil, local, fmt.Errorf("delivery: followers of %s: %w", actor.URI, err)
				}
				for _, b := range boxes {
					add(b.URL, b.Recipient, b.Shared, b.Several)
				}
			case s.uris.IsLocal(r):
				// A local actor (imported for it, without HTTP) or another
				// local collection (nothing to POST).
				if err := s.namedLocal(ctx, r, addLocal); err != nil {
					return nil, local, err
				}
			default:
				if err := named(r); err != nil {
					return nil, local, err
				}
			}
		}
	}
	// An Undo goes where what it takes back went (its delivery rows):
	// looking the reacted-to author up again can answer otherwise than it
	// did for the Like (the note's host down then and up now, or the other
	// way round), and the Undo must neither miss an inbox that holds the
	// Like nor reach one that never got it.
	undone, known, err := s.undoneInboxes(ctx, act)
	if err != nil {
		return nil, local, err
	}
	for _, inbox := range undone {
		add(inbox, "", false, false)
	}
	// A reaction reaches the author of what it reacts to, whom its
	// addressing does not name when courier had not stored the object.
	if !known {
		author, err := s.reactionAuthor(ctx, act)
		if err != nil {
			return nil, local, err
		}
		if author != "" && !seen[author] && !s.uris.IsLocal(author) {
			if err := named(author); err != nil {
				return nil, local, err
			}
		}
	}
	// A public or unlisted reply reaches the local author of what it
	// replies to, whom its addressing may not name
	// (docs/application-api.md): the import makes it a reply in its inbox
	// view. A followers-only or direct reply reaches those it names only.
	if parent, err := s.replyAuthor(ctx, act); err != nil {
		return nil, local, err
	} else if parent != "" {
		addLocal(parent)
	}
	if len(byInbox) == 0 && len(local.names) == 0 && len(unknown) > 0 {
		return nil, local, outbox.Permanent(errors.Join(unknown...))
	}
	return interleave(byInbox), local, nil
}

// undoneInboxes returns the remote inboxes the local activity an Undo
// takes back was fanned out to, and whether they are known: the activity
// is courier's, and recent enough that none of its delivery rows has been
// swept (Config.Retention), whose fan-out is done: an Undo's fan-out
// waits for the earlier ones of its order key (fanoutGate), so it mostly
// is. An activity that went nowhere remote is known with no inboxes.
func (s *Service) undoneInboxes(ctx context.Context, act *activitypub.Activity) ([]string, bool, error) {
	if act.Type != "Undo" || act.Object == nil || act.Object.ID == "" || !s.uris.IsLocal(act.Object.ID) {
		return nil, false, nil
	}
	undone, err := s.store.ActivityByURI(ctx, act.Object.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("delivery: the activity %s undoes: %w", act.ID, err)
	case undone.Published.IsZero() || !undone.Published.After(s.now().Add(-s.cfg.Retention+time.Hour)):
		return nil, false, nil // its rows may be swept: not known
	}
	// Its fan-out is done (the ledger's mark, on either bus); one still
	// pending or given up past fanoutGate's wait has no rows to go by.
	var mark string
	err = s.db.Read.QueryRowContext(ctx, `SELECT status FROM processed_events WHERE event_id = ? AND handler = ?`,
		undone.EventID, HandlerFanout).Scan(&mark)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("delivery: the fan-out of %s: %w", undone.URI, err)
	case mark != "done":
		return nil, false, nil
	}
	rows, err := s.db.Read.QueryContext(ctx,
		`SELECT DISTINCT inbox FROM delivery_targets WHERE activity_id = ? ORDER BY inbox`, undone.URI)
	if err != nil {
		return nil, false, fmt.Errorf("delivery: the inboxes of %s: %w", undone.URI, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var inbox string
		if err := rows.Scan(&inbox); err != nil {
			return nil, false, fmt.Errorf("delivery: the inboxes of %s: %w", undone.URI, err)
		}
		out = append(out, inbox)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("delivery: the inboxes of %s: %w", undone.URI, err)
	}
	return out, true, nil
}

// reactionAuthor returns the author of the remote object a Like or Announce
// (or the Undo of one) reacts to: from the store when courier has the
// object, else fetched (signed GET) through Config.Objects. It returns ""
// for other activities, local objects, and objects that cannot be fetched
// for good; a transient fetch failure is an error, so the fan-out retries.
func (s *Service) reactionAuthor(ctx context.Context, act *activitypub.Activity) (string, error) {
	obj := ""
	switch {
	case act.Type == "Like" || act.Type == "Announce":
		obj = act.ObjectID
	case act.Type == "Undo" && act.Object != nil && (act.Object.Type == "Like" || act.Object.Type == "Announce"):
		obj = act.Object.ObjectID
	}
	if obj == "" || s.uris.IsLocal(obj) {
		return "", nil
	}
	o, err := s.store.ObjectByURI(ctx, obj)
	switch {
	case err == nil:
		return o.AttributedTo, nil
	case !errors.Is(err, store.ErrNotFound):
		return "", fmt.Errorf("delivery: object %s: %w", obj, err)
	case s.cfg.Objects == nil:
		return "", nil
	}
	body, _, err := s.cfg.Objects.Fetch(ctx, obj)
	if err == nil {
		var fetched *activitypub.Object
		if fetched, err = activitypub.ParseObject(body); err == nil && len(fetched.AttributedTo) > 0 {
			return fetched.AttributedTo[0], nil
		}
	}
	if skip, why := unresolvable(err); skip || err == nil {
		s.log.InfoContext(ctx, "delivery: the author of a reacted-to object is unknown",
			"activity_id", act.ID, "object", obj, "reason", why, "err", err)
		return "", nil
	}
	return "", fmt.Errorf("delivery: fetch %s: %w", obj, err)
}

// replyAuthor returns the local author of the local object a public or
// unlisted Create replies to; "" for anything else.
func (s *Service) replyAuthor(ctx context.Context, act *activitypub.Activity) (string, error) {
	obj := act.Object
	if act.Type != "Create" || obj == nil || obj.InReplyTo == "" || !s.uris.IsLocal(obj.InReplyTo) {
		return "", nil
	}
	public := false
	for _, l := range [][]string{act.To, act.Cc, obj.To, obj.Cc} {
		for _, r := range l {
			public = public || activitypub.IsPublic(r)
		}
	}
	if !public {
		return "", nil
	}
	o, err := s.store.ObjectByURI(ctx, obj.InReplyTo)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("delivery: object %s: %w", obj.InReplyTo, err)
	case !o.Local() || o.Deleted():
		return "", nil
	}
	return o.AttributedTo, nil
}

// interleave orders targets deterministically so that consecutive ones go
// to different hosts (round-robin over the hosts, each host's inboxes in
// order): the outbox claims deliveries in insertion order, and a run of one
// host's deliveries would queue on its concurrency bound while the other
// hosts wait.
func interleave(byInbox map[string]*target) []target {
	byHost := map[string][]target{}
	for _, t := range byInbox {
		byHost[t.host] = append(byHost[t.host], *t)
	}
	hosts := make([]string, 0, len(byHost))
	for h, ts := range byHost {
		hosts = append(hosts, h)
		sort.Slice(ts, func(i, j int) bool { return ts[i].inbox < ts[j].inbox })
	}
	sort.Strings(hosts)
	out := make([]target, 0, len(byInbox))
	for round := 0; len(out) < len(byInbox); round++ {
		for _, h := range hosts {
			if ts := byHost[h]; round < len(ts) {
				out = append(out, ts[round])
			}
		}
	}
	return out
}

// named resolves one named remote recipient and adds its inbox (its host's
// shared inbox when it has one). Blocked actors and domains are skipped,
// except the object of a Block, which is told of it. A recipient that
// cannot be resolved for good (410, 404, not an actor) is skipped and
// logged; any other failure fails the fan-out, which is retried. A failure
// that says the recipient's host is down (no such name, no answer, 5xx) is
// recorded in the host's health before any delivery to it exists, so that
// admin hosts and the console show it; a host name that does not exist is
// a *nameNotFoundError from the NameNotFoundAttempts-th attempt on.
func (s *Service) named(ctx context.Context, eventID string, actor *store.Actor, act *activitypub.Activity, r string,
	add func(inbox, recipient string, shared, several bool)) error {
	if _, ok := inboxHost(r); !ok {
		s.log.InfoContext(ctx, "delivery: skipping a recipient that is not an http(s) URL",
			"activity_id", act.ID, "recipient", activitypub.RedactURL(r))
		return nil
	}
	var blocked bool
	var err error
	if act.Type == "Block" && act.ObjectID == r {
		blocked, err = s.store.IsDomainBlocked(ctx, r) // the blocked actor is told of its Block
	} else {
		blocked, err = s.store.DeliveryBlocked(ctx, actor.ID, r)
	}
	if err != nil {
		return fmt.Errorf("delivery: audience of %s: %w", act.ID, err)
	}
	if blocked {
		return nil
	}
	a, err := s.cfg.Resolver.Actor(ctx, r)
	if err != nil {
		if skip, why := unresolvable(err); skip {
			return &skippedError{recipient: r, why: why, err: err}
		}
		err = fmt.Errorf("delivery: resolve recipient %s of %s: %w", r, act.ID, err)
		d := resolveDecision(err)
		if host, ok := inboxHost(r); ok && d.HostDown && ctx.Err() == nil {
			s.health.observe(ctx, host, eventID, d, false, s.now())
		}
		if nameNotFound(err) && outbox.Attempt(ctx) >= NameNotFoundAttempts {
			return &nameNotFoundError{err: err}
		}
		return err
	}
	inbox := a.InboxFor()
	if blocked, err := s.store.IsDomainBlocked(ctx, inbox); err != nil {
		return fmt.Errorf("delivery: audience of %s: %w", act.ID, err)
	} else if blocked {
		return nil
	}
	add(inbox, a.ID, a.SharedInbox != "", false)
	return nil
}

// skippedError is a recipient left out for good: it cannot be resolved
// (gone, not found, not an actor, refused).
type skippedError struct {
	recipient, why string
	err            error
}

func (e *skippedError) Error() string {
	return fmt.Sprintf("recipient %s cannot be resolved (%s): %v", e.recipient, e.why, e.err)
}
func (e *skippedError) Unwrap() error { return e.err }

// NameNotFoundAttempts is the attempt of a fan-out from which a named
// recipient whose host name does not exist (NXDOMAIN) is given up: the
// first ones are retried in case the answer was a resolver's passing
// mistake, the rest of the outbox's attempts would only repeat it.
const NameNotFoundAttempts = 3

// nameNotFoundError is a recipient given up because its host name does not
// exist.
type nameNotFoundError struct{ err error }

func (e *nameNotFoundError) Error() string { return e.err.Error() }
func (e *nameNotFoundError) Unwrap() error { return e.err }

// nameNotFound reports whether err says a host name does not exist.
func nameNotFound(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// resolveDecision classifies the failure to fetch a recipient as a POST's
// would be: a status by Classify, a transport error by its kind.
func resolveDecision(err error) Decision {
	var st *activitypub.StatusError
	if errors.As(err, &st) {
		return Classify(st.Status, nil, nil, time.Time{}, 0)
	}
	return classifyError(err)
}

// unresolvable reports whether a resolve error is permanent for the
// recipient, and a short reason.
func unresolvable(err error) (bool, string) {
	var st *activitypub.StatusError
	switch {
	case errors.Is(err, activitypub.ErrGone):
		return true, "gone"
	case errors.Is(err, activitypub.ErrNotFound):
		return true, "not_found"
	case errors.Is(err, activitypub.ErrMalformed), errors.Is(err, activitypub.ErrIDMismatch),
		errors.Is(err, activitypub.ErrContentType), errors.Is(err, activitypub.ErrTooLarge):
		return true, "not_an_actor"
	case errors.Is(err, activitypub.ErrBadURL), errors.Is(err, activitypub.ErrPrivateAddress):
		return true, "refused"
	case errors.As(err, &st):
		d := Classify(st.Status, nil, nil, time.Time{}, 0)
		if d.Verdict == Permanent {
			return true, fmt.Sprintf("status_%d", st.Status)
		}
	}
	return false, ""
}

// inboxHost returns the host key of an http(s) URL: its host (and port,
// when not the scheme's default), lower-cased.
func inboxHost(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", false
	}
	return NormalizeHost(u.Host, u.Scheme), true
}

// NormalizeHost lower-cases host and drops the scheme's default port (443
// for https, 80 for http; scheme may be empty), the form host state is kept
// under. Callers of the Health methods pass a bare host ("example.com") or
// host:port.
func NormalizeHost(host, scheme string) string {
	host = strings.ToLower(strings.TrimSpace(host))
	if h, port, err := net.SplitHostPort(host); err == nil &&
		((port == "443" && scheme != "http") || (port == "80" && scheme != "https")) {
		host = h
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
	}
	return strings.TrimSuffix(host, ".")
}
