package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// deliver handles an EventPost event: it passes the host's health gate and
// concurrency bound, signs the POST and sends it as a flight (see flight),
// waits up to HandOff for the answer, and returns the outcome; a flight
// that lands later is recorded and applied to the host's health by itself,
// and the row's next run returns its outcome without sending again.
func (s *Service) deliver(ctx context.Context, ev outbox.Event) error {
	var p Post
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.Inbox == "" || p.Actor == "" || p.ActivityID == "" {
		return outbox.Permanent(fmt.Errorf("%w: delivery %s: %v", ErrPayload, ev.ID, err))
	}
	host := ev.Target
	if host == "" {
		h, ok := inboxHost(p.Inbox)
		if !ok {
			return outbox.Permanent(fmt.Errorf("%w: delivery %s: inbox %q is not an http(s) URL", ErrPayload, ev.ID, p.Inbox))
		}
		host = h
	}
	if s.flights.get(ev.ID) == nil {
		// Before anything of the host is taken: a delivery waiting for an
		// earlier one of its object holds no slot (order.go).
		if err := s.orderGate(ctx, ev); err != nil {
			return err
		}
	}
	return s.post(ctx, ev, &p, host, func(ctx context.Context) (*prepared, error) { return s.request(ctx, p, host) })
}

// post sends the delivery p of ev to host, with its request built by
// build once the host's health and a slot allow it.
func (s *Service) post(ctx context.Context, ev outbox.Event, p *Post, host string, build func(context.Context) (*prepared, error)) error {
	if f := s.flights.get(ev.ID); f != nil {
		select {
		case <-f.done:
			s.flights.remove(ev.ID)
			return s.landed(f)
		default:
			return outbox.Defer(f.deadline, "host "+host+" slow: the answer to this delivery is awaited")
		}
	}
	now := s.now()
	adm, err := s.health.admit(ctx, host, ev, now)
	if err != nil {
		var perm *outbox.PermanentError
		if errors.As(err, &perm) {
			s.record(*p, ev.ID, host, now, 0, OutcomeDead, err.Error(), 0)
		}
		return err
	}
	// A delivery never waits long for its host's slot: it comes back a
	// little later (after the host's backoff when it is failing, or once a
	// host that has not answered in HandOff answers) without spending an
	// attempt, so a slow or dead host costs neither workers nor database
	// churn.
	limit, slotWait, backoff := s.health.slotPolicy(host)
	release, ok := s.slots.acquire(ctx, host, limit, slotWait)
	if !ok {
		s.health.endTry(ctx, host, ev.ID, now) // a failing host's try sends nothing
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.flights.isSuspect(host) {
			s.cfg.Metrics.Parked(ParkedAwaitingAnswer)
			return outbox.Defer(s.now().Add(max(s.cfg.Timeout+flightGrace, backoff)),
				"host "+host+" has not answered yet: waiting for it")
		}
		delay := s.cfg.SlotDefer/2 + time.Duration(rand.Int64N(int64(s.cfg.SlotDefer)/2+1))
		return outbox.Defer(s.now().Add(max(delay, backoff)), "host "+host+" busy: no free delivery slot")
	}
	req, err := build(ctx)
	if err != nil {
		release()
		s.health.endTry(ctx, host, ev.ID, now)
		if errors.Is(err, activitypub.ErrBadURL) {
			s.record(*p, ev.ID, host, now, 0, OutcomePermanent, err.Error(), 0)
		}
		return err
	}
	f, ok := s.launch(ev, *p, host, adm.probe, req, release)
	if !ok {
		release()
		s.health.endTry(ctx, host, ev.ID, now)
		s.cfg.Metrics.Parked(ParkedInFlightLimit)
		delay := s.cfg.SlotDefer/2 + time.Duration(rand.Int64N(int64(s.cfg.SlotDefer)/2+1))
		return outbox.Defer(s.now().Add(delay), fmt.Sprintf("%d POSTs in flight: the limit", s.cfg.MaxInFlight))
	}
	if !s.await(ctx, f) {
		return outbox.Defer(f.deadline, "host "+host+" slow: the answer to this delivery is awaited")
	}
	s.flights.remove(ev.ID)
	return s.landed(f)
}

// prepared is a delivery's POST, signed in the first scheme its host is
// to get, with what a fallback to the next scheme needs (see
// sendLearning).
type prepared struct {
	req   *http.Request
	body  []byte
	sig   activitypub.Signer
	order []Scheme
	sync  string // the Collection-Synchronization header, or ""
	// client, when set, sends req as it is, without signature schemes
	// to learn (a channel's POST); nil is the delivery client.
	client *http.Client
}

// request builds and signs the POST of p to host, on one of the CPU slots
// (one per core): signing is the costly part of a delivery.
func (s *Service) request(ctx context.Context, p Post, host string) (*prepared, error) {
	select {
	case s.flights.cpu <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.flights.cpu }()
	sig, err := s.signer(ctx, p.Actor)
	if err != nil {
		if errors.Is(err, ErrNotLocal) {
			return nil, outbox.Permanent(err)
		}
		return nil, err
	}
	body, err := s.activity(ctx, p.ActivityID, p.Forward)
	if err != nil {
		return nil, err
	}
	sync, err := s.followersSync(ctx, p, body)
	if err != nil {
		return nil, err
	}
	order := s.schemeOrder(ctx, host, sig)
	req, err := s.newPost(p.Inbox, body, sig, order[0], sync)
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("delivery: %s: %w", p.Inbox, err))
	}
	return &prepared{req: req, body: body, sig: sig, order: order, sync: sync}, nil
}

// followersSync returns the Collection-Synchronization header (FEP-8fcf)
// of the delivery p of body, or "": a delivery of a followers-only
// activity (addressed to its actor's followers, not to the public) to the
// shared inbox of one of the actor's followers carries the digest of the
// actor's followers on that inbox's server, computed now, as the receiver
// will compare it with what it holds now (store.FollowersSync).
func (s *Service) followersSync(ctx context.Context, p Post, body []byte) (string, error) {
	uris := s.store.URIs()
	name, ok := uris.ActorName(p.Actor)
	if !ok {
		return "", nil
	}
	act, err := activitypub.ParseActivity(body)
	if err != nil || store.Visibility(append(act.To, act.Bto...), append(act.Cc, act.Bcc...), uris.Followers(name)) != store.VisibilityFollowers {
		return "", nil
	}
	cs, ok, err := s.store.FollowersSync(ctx, p.Actor, p.Inbox)
	if err != nil || !ok {
		return "", err
	}
	return cs.String(), nil
}

// newPost builds the POST of body to inbox, signed with scheme, with the
// Collection-Synchronization header sync (signed too) when not "".
func (s *Service) newPost(inbox string, body []byte, sig activitypub.Signer, scheme Scheme, sync string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodPost, inbox, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", activitypub.ErrBadURL, err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	if sync != "" {
		req.Header.Set(activitypub.CollectionSyncHeader, sync)
	}
	if err := signAs(req, body, sig, scheme, s.now()); err != nil {
		return nil, err
	}
	return req, nil
}

// maxCachedActivities bounds the activity cache; when full it is cleared.
const maxCachedActivities = 256

// activity returns the stored bytes of the activity id, the body of its
// deliveries, from a small cache in front of the activities table (of the
// forwards table for a forwarded inbound activity).
func (s *Service) activity(ctx context.Context, id string, forwarded bool) ([]byte, error) {
	key := id
	if forwarded {
		key = "forward\x00" + id
	}
	s.docsMu.Lock()
	doc, ok := s.docs[key]
	s.docsMu.Unlock()
	if ok {
		return doc, nil
	}
	var err error
	if forwarded {
		doc, err = s.store.ForwardDocument(ctx, id)
	} else {
		var a *store.Activity
		if a, err = s.store.ActivityByURI(ctx, id); err == nil {
			doc = a.Document
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, outbox.Permanent(fmt.Errorf("%w: activity %s is not stored", ErrPayload, id))
	}
	if err != nil {
		return nil, fmt.Errorf("delivery: load activity %s: %w", id, err)
	}
	s.docsMu.Lock()
	if len(s.docs) >= maxCachedActivities {
		clear(s.docs)
	}
	s.docs[key] = doc
	s.docsMu.Unlock()
	return doc, nil
}

// removeGone removes an actor whose inbox answered 410 from every local
// actor's followers.
func (s *Service) removeGone(ctx context.Context, actor string) {
	n, err := s.store.RemoveFollowerEverywhere(ctx, actor)
	if err != nil {
		s.log.WarnContext(ctx, "delivery: remove gone follower", "actor", actor, "err", err)
		return
	}
	s.log.InfoContext(ctx, "delivery: inbox gone; follower removed", "actor", actor, "followers_removed", n)
}

func (s *Service) record(p Post, eventID, host string, at time.Time, status int, outcome, msg string, took time.Duration) {
	if outcome == OutcomeDelivered {
		msg = ""
	}
	s.rec.add(recOp{attempt: &attemptRow{eventID: eventID, activityID: p.ActivityID, inbox: p.Inbox, host: host,
		at: at, status: status, outcome: outcome, err: msg, took: took}})
}

// outcomeOf is the outcome of a POST with verdict v, both recorded and
// counted.
func outcomeOf(v Verdict) string {
	switch v {
	case Delivered:
		return OutcomeDelivered
	case Permanent:
		return OutcomePermanent
	case Refused:
		return OutcomeRefused
	}
	return OutcomeRetry
}

// slotSet bounds concurrent POSTs per host in this process. Within the
// bound, a host's concurrency ramps up only when its deliveries queue: a
// delivery finding the host's POSTs in flight on every connection it has
// waits for one of them to end (and then reuses its connection), until the
// host's newest POST in flight has been unanswered for rampAfter; then it
// starts a POST beside them, on a new connection (HTTP/1.1 carries one
// request at a time). So a burst to a host that answers quickly goes over
// the connection that just became idle, and a host that answers slowly or
// whose queue persists gets up to the bound without holding its
// deliveries' handlers longer than rampAfter. The connections a host has
// are taken to be the most POSTs it ever had in flight at once; that many
// start without waiting.
type slotSet struct {
	rampAfter time.Duration

	mu      sync.Mutex
	inUse   map[string]int
	peak    map[string]int       // the most POSTs host had in flight at once
	newest  map[string]time.Time // when host's newest POST in flight started
	waiting map[string]int       // deliveries waiting for a slot of host
	freed   map[string]chan struct{}
}

// rampDivisor: once its host's newest POST in flight has gone unanswered
// for SlotWait/rampDivisor (100 ms by default), a delivery starts one
// beside it.
const rampDivisor = 5

// maxSlotHosts bounds the peak map; when full it is cleared, which only
// costs a host a wait for its POST in flight.
const maxSlotHosts = 100_000

func newSlotSet(rampAfter time.Duration) *slotSet {
	return &slotSet{rampAfter: rampAfter, inUse: map[string]int{}, peak: map[string]int{},
		newest: map[string]time.Time{}, waiting: map[string]int{}, freed: map[string]chan struct{}{}}
}

// acquire takes one of host's limit slots, waiting up to wait. It returns
// the release function, or false when no slot freed up in time.
func (s *slotSet) acquire(ctx context.Context, host string, limit int, wait time.Duration) (func(), bool) {
	var timer, ramp *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if ramp != nil {
			ramp.Stop()
		}
	}()
	queued, ramped := false, false
	for {
		s.mu.Lock()
		n := s.inUse[host]
		if n < limit && (n < max(s.peak[host], 1) || ramped || wait <= 0) {
			s.inUse[host]++
			if n+1 > s.peak[host] {
				if len(s.peak) >= maxSlotHosts {
					clear(s.peak)
				}
				s.peak[host] = n + 1
			}
			s.newest[host] = time.Now()
			if queued {
				s.unqueue(host)
			}
			s.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { s.release(host) }) }, true
		}
		if wait <= 0 {
			s.mu.Unlock()
			return nil, false
		}
		rampIn := s.rampAfter - time.Since(s.newest[host])
		if n < limit && !ramped && rampIn <= 0 {
			// The newest POST in flight has gone unanswered for
			// rampAfter: waiting for it is no use.
			ramped = true
			s.mu.Unlock()
			continue
		}
		if !queued {
			queued = true
			s.waiting[host]++
		}
		ch := s.freed[host]
		if ch == nil {
			ch = make(chan struct{})
			s.freed[host] = ch
		}
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		if ramp == nil && n < limit && rampIn < wait {
			ramp = time.NewTimer(rampIn)
		}
		var rampC <-chan time.Time
		if ramp != nil && !ramped {
			rampC = ramp.C
		}
		select {
		case <-ch:
			continue
		case <-rampC:
			ramped = true
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.unqueue(host)
		s.mu.Unlock()
		return nil, false
	}
}

// unqueue forgets one waiter of host; s.mu is held.
func (s *slotSet) unqueue(host string) {
	if s.waiting[host] <= 1 {
		delete(s.waiting, host)
	} else {
		s.waiting[host]--
	}
}

func (s *slotSet) release(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse[host] <= 1 {
		delete(s.inUse, host)
		delete(s.newest, host)
	} else {
		s.inUse[host]--
	}
	if ch := s.freed[host]; ch != nil {
		close(ch)
		delete(s.freed, host)
	}
}
