package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/courier-ap/courier/activitypub"
)

// Bounds of the load's HTTP traffic.
const (
	requestTimeout  = 10 * time.Second
	maxResponseBody = 1 << 20
	maxInFlight     = 8 // concurrent requests of each load stream
)

// localActor is an actor created in courier for the run.
type localActor struct {
	name  string
	id    string
	token string
	inbox string
}

// note is a note a local actor wrote that courier acknowledged.
type note struct {
	id     string
	author *localActor
}

// writer posts notes through courier's client-to-server API at a steady
// rate, as the actors' clients would.
type writer struct {
	base   string
	actors []*localActor
	client *http.Client
	logger *slog.Logger

	mu       sync.Mutex
	rng      *rand.Rand
	acked    map[string]note // activity id -> its note
	notes    []note
	failed   int // no answer or 5xx: courier may or may not have it
	rejected int // 4xx: courier refused the write
	seq      int // writes attempted so far; numbers the next note
}

func newWriter(base string, actors []*localActor, seed uint64, logger *slog.Logger) *writer {
	return &writer{
		base: base, actors: actors, logger: logger,
		client: &http.Client{Timeout: requestTimeout},
		rng:    rand.New(rand.NewPCG(seed, 1)),
		acked:  map[string]note{},
	}
}

// run writes rate notes per second until ctx ends, then waits for the
// requests in flight.
func (w *writer) run(ctx context.Context, rate float64) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // maxInFlight requests are pending: skip this tick
		}
		w.mu.Lock()
		a := w.actors[w.rng.IntN(len(w.actors))]
		w.seq++
		n := w.seq
		w.mu.Unlock()
		wg.Go(func() {
			defer func() { <-sem }()
			w.write(ctx, a, n)
		})
	}
}

// write posts one public note as a.
func (w *writer) write(ctx context.Context, a *localActor, n int) {
	body, _ := json.Marshal(map[string]any{ // strings and string slices always marshal
		"@context": activitypub.ActivityStreams,
		"type":     "Note",
		"content":  fmt.Sprintf("<p>chaos note %d by %s</p>", n, a.name),
		"to":       []string{activitypub.Public},
		"cc":       []string{a.id + "/followers"},
	})
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, w.base+"/users/"+a.name+"/outbox", bytes.NewReader(body))
	if err != nil {
		w.count(0, "", "", a)
		return
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", activitypub.ContentType)
	resp, err := w.client.Do(req)
	if err != nil {
		w.count(0, "", "", a) // no answer: its fate is read from the database
		return
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil || resp.StatusCode != http.StatusCreated {
		w.count(resp.StatusCode, "", "", a)
		return
	}
	act, err := activitypub.ParseActivity(rb)
	if err != nil || act.ObjectID == "" {
		w.logger.Warn("write answered 201 without a Create of a note", "actor", a.name, "err", err)
		w.count(http.StatusUnprocessableEntity, "", "", a)
		return
	}
	w.count(resp.StatusCode, act.ID, act.ObjectID, a)
}

// count records the outcome of one write: acknowledged (with its ids),
// refused (4xx) or unanswered.
func (w *writer) count(status int, activityID, noteID string, a *localActor) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case activityID != "":
		n := note{id: noteID, author: a}
		w.acked[activityID] = n
		w.notes = append(w.notes, n)
	case status >= 400 && status < 500:
		w.rejected++
		if w.rejected <= 3 {
			w.logger.Warn("write refused", "status", status, "actor", a.name)
		}
	default:
		w.failed++
	}
}

// randomNote returns an acknowledged note, or false when there is none yet.
func (w *writer) randomNote(rng *rand.Rand) (note, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.notes) == 0 {
		return note{}, false
	}
	return w.notes[rng.IntN(len(w.notes))], true
}

// writeStats are the writer's counts.
type writeStats struct {
	Attempted, Acked, Failed, Rejected int
	AckedIDs                           map[string]note
}

func (w *writer) stats() writeStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make(map[string]note, len(w.acked))
	for k, v := range w.acked {
		ids[k] = v
	}
	return writeStats{Attempted: w.seq, Acked: len(w.acked), Failed: w.failed, Rejected: w.rejected, AckedIDs: ids}
}

// inboundActivity is an activity a remote actor sends to courier. Like a
// real peer, the sender retries it (freshly signed) until courier answers
// 202, and now and then sends it again after that.
type inboundActivity struct {
	id       string
	typ      string // Create (of a Note), Like or Follow
	from     *remoteActor
	objectID string // the Note created, the note liked, the actor followed
	target   string // courier inbox URL
	body     []byte

	acked   bool
	ackedAt time.Time
	refused int // last 4xx status, when courier refused it
	sends   int
	next    time.Time
	resend  bool // send once more after the ack (a duplicate)
	resent  bool
}

// sender delivers inbound activities to courier's inboxes with retries.
type sender struct {
	client *http.Client
	logger *slog.Logger

	mu      sync.Mutex
	rng     *rand.Rand
	items   []*inboundActivity
	liked   map[[2]string]bool // (remote actor, note) pairs already liked
	dups    int                // duplicate sends after an ack
	refusal int                // 4xx answers, of which the first few are logged
}

func newSender(seed uint64, logger *slog.Logger) *sender {
	return &sender{
		client: &http.Client{Timeout: requestTimeout},
		logger: logger,
		rng:    rand.New(rand.NewPCG(seed, 2)),
		liked:  map[[2]string]bool{},
	}
}

// add queues a for sending now; resendShare is the chance it is sent once
// more after courier acknowledged it.
func (s *sender) add(a *inboundActivity, resendShare float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.next = time.Now()
	a.resend = s.rng.Float64() < resendShare
	s.items = append(s.items, a)
}

// dispatch sends due activities until ctx ends, at most maxInFlight at once.
func (s *sender) dispatch(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInFlight)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, a := range s.due(time.Now(), cap(sem)-len(sem)) {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				s.send(ctx, a)
			})
		}
	}
}

// due picks up to n activities to send now and marks them in flight.
func (s *sender) due(now time.Time, n int) []*inboundActivity {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*inboundActivity
	for _, a := range s.items {
		if len(out) >= n {
			break
		}
		if a.next.IsZero() || a.next.After(now) || a.refused != 0 {
			continue
		}
		if a.acked && (!a.resend || a.resent) {
			continue
		}
		a.next = time.Time{} // in flight
		out = append(out, a)
	}
	return out
}

func (s *sender) send(ctx context.Context, a *inboundActivity) {
	status, err := s.post(context.WithoutCancel(ctx), a)
	s.mu.Lock()
	defer s.mu.Unlock()
	a.sends++
	switch {
	case err == nil && status >= 200 && status < 300:
		if a.acked {
			a.resent = true
			s.dups++
			return
		}
		a.acked, a.ackedAt = true, time.Now()
		if a.resend {
			a.next = time.Now().Add(time.Second + time.Duration(s.rng.Int64N(int64(4*time.Second))))
		}
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		if a.acked {
			a.resent = true // a refused duplicate is still a duplicate handled
			s.dups++
			return
		}
		a.refused = status
		if s.refusal++; s.refusal <= 5 {
			s.logger.Warn("inbound activity refused", "status", status, "type", a.typ, "activity_id", a.id)
		}
	default:
		a.next = time.Now().Add(250*time.Millisecond + time.Duration(s.rng.Int64N(int64(time.Second))))
	}
}

// post sends a once, freshly signed, and returns courier's status.
func (s *sender) post(ctx context.Context, a *inboundActivity) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.target, bytes.NewReader(a.body))
	if err != nil {
		return 0, fmt.Errorf("chaos: inbound request: %w", err)
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := a.from.sign(req, a.body, time.Now()); err != nil {
		return 0, fmt.Errorf("chaos: sign inbound: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// pending counts the activities not yet acknowledged nor refused.
func (s *sender) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.items {
		if !a.acked && a.refused == 0 {
			n++
		}
	}
	return n
}

// snapshot copies the activities' state.
func (s *sender) snapshot() ([]inboundActivity, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]inboundActivity, len(s.items))
	for i, a := range s.items {
		out[i] = *a
	}
	return out, s.dups
}

// newFollow builds a Follow of the local actor to by from.
func newFollow(from *remoteActor, to *localActor) *inboundActivity {
	id := from.host.base + "/follows/" + uuid.NewString()
	body, _ := json.Marshal(map[string]any{
		"@context": activitypub.ActivityStreams,
		"id":       id,
		"type":     "Follow",
		"actor":    from.id,
		"object":   to.id,
	})
	return &inboundActivity{id: id, typ: "Follow", from: from, objectID: to.id, target: to.inbox, body: body}
}

// newCreate builds a Create of a public Note by from that mentions the
// local actor to, sent to to's inbox or to the shared inbox.
func newCreate(from *remoteActor, to *localActor, sharedInbox string, useShared bool, n int, now time.Time) *inboundActivity {
	noteID := from.host.base + "/notes/" + uuid.NewString()
	id := from.host.base + "/activities/" + uuid.NewString()
	published := now.UTC().Format(time.RFC3339)
	audTo := []string{activitypub.Public}
	audCc := []string{from.id + "/followers", to.id}
	object := map[string]any{
		"id":           noteID,
		"type":         "Note",
		"attributedTo": from.id,
		"content":      fmt.Sprintf("<p>remote chaos note %d from %s</p>", n, from.name),
		"published":    published,
		"to":           audTo,
		"cc":           audCc,
		"tag":          []map[string]string{{"type": "Mention", "href": to.id}},
	}
	body, _ := json.Marshal(map[string]any{
		"@context":  activitypub.ActivityStreams,
		"id":        id,
		"type":      "Create",
		"actor":     from.id,
		"published": published,
		"to":        audTo,
		"cc":        audCc,
		"object":    object,
	})
	if from.host != nil {
		doc := map[string]any{"@context": activitypub.ActivityStreams}
		for k, v := range object {
			doc[k] = v
		}
		b, _ := json.Marshal(doc)
		from.host.keepNote(noteID, b)
	}
	target := to.inbox
	if useShared {
		target = sharedInbox
	}
	return &inboundActivity{id: id, typ: "Create", from: from, objectID: noteID, target: target, body: body}
}

// newLike builds a Like by from of the local note n, sent to its author's
// inbox.
func newLike(from *remoteActor, n note) *inboundActivity {
	id := from.host.base + "/likes/" + uuid.NewString()
	body, _ := json.Marshal(map[string]any{
		"@context": activitypub.ActivityStreams,
		"id":       id,
		"type":     "Like",
		"actor":    from.id,
		"object":   n.id,
		"to":       []string{n.author.id},
	})
	return &inboundActivity{id: id, typ: "Like", from: from, objectID: n.id, target: n.author.inbox, body: body}
}

// ackedNote returns the id of a remote note whose Create courier
// acknowledged before before, or false when there is none.
func (s *sender) ackedNote(rng *rand.Rand, before time.Time) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, a := range s.items {
		if a.typ == "Create" && a.acked && a.ackedAt.Before(before) {
			ids = append(ids, a.objectID)
		}
	}
	if len(ids) == 0 {
		return "", false
	}
	return ids[rng.IntN(len(ids))], true
}

// tryLike reserves the (actor, note) pair; each remote actor likes a note
// at most once, so that like counts can be compared with what was sent.
func (s *sender) tryLike(actor, noteID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{actor, noteID}
	if s.liked[k] {
		return false
	}
	s.liked[k] = true
	return true
}
