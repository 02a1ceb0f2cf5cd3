package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// Bounds of the convergence writes.
const (
	convergeInFlight = 8                      // stories written at once
	convergeTries    = 6                      // attempts of one write that got no answer, a 5xx or a 429
	convergeGapMin   = 50 * time.Millisecond  // least pause between two writes of one story
	convergeGapMax   = 400 * time.Millisecond // most pause between two writes of one story
	likeAfter        = 3 * time.Second        // a remote note is liked once courier has had it this long
	likeWaitMax      = 20 * time.Second       // how long a like story waits for such a note
)

// storyKind is what one convergence story writes.
type storyKind int

const (
	storyObject storyKind = iota // Create, Updates, sometimes a Delete
	storyLike                    // Like and Undo of a remote note, once or twice
	storyFollow                  // Follow and Undo of a remote actor, once or twice
)

// story is one sequence of writes on one (object, inbox) relation.
type story struct {
	kind   storyKind
	n      int          // the object's number (storyObject)
	actor  *localActor  // the writer
	target *remoteActor // the actor followed (storyFollow)
}

// converger writes the convergence run's stories through courier's
// client-to-server API, as the actors' clients would: each story's writes
// in order, each after the previous one was answered.
type converger struct {
	base    string
	actors  []*localActor
	remotes []*remoteActor
	notes   func(rng *rand.Rand, before time.Time) (string, bool) // a remote note courier acknowledged before
	client  *http.Client
	logger  *slog.Logger
	seed    uint64
	objects int

	mu    sync.Mutex
	liked map[relation]bool // (local actor, remote note) pairs taken by a like story
	stats convergeStats
}

// convergeStats are the converger's counts of writes.
type convergeStats struct {
	Stories, Done                int
	Writes, Acked, Unanswered    int
	Refused                      int // 4xx other than 404, 409 and 410 (which a retried write may meet)
	Objects, Likes, Follows, Gap int // stories by kind; Gap: like stories that found no note to like
}

func newConverger(base string, actors []*localActor, remotes []*remoteActor, objects int, seed uint64,
	notes func(*rand.Rand, time.Time) (string, bool), logger *slog.Logger) *converger {
	return &converger{base: base, actors: actors, remotes: remotes, notes: notes, objects: objects, seed: seed,
		client: &http.Client{Timeout: requestTimeout}, logger: logger, liked: map[relation]bool{}}
}

// plan lists the stories: one per object, a like story for every second
// object, a follow story for every fourth (each on a (local, remote) pair
// of its own, as many as there are pairs), shuffled.
func (c *converger) plan() []story {
	rng := rand.New(rand.NewPCG(c.seed, 11))
	var out []story
	for n := range c.objects {
		out = append(out, story{kind: storyObject, n: n, actor: c.actors[rng.IntN(len(c.actors))]})
	}
	for range c.objects / 2 {
		out = append(out, story{kind: storyLike, actor: c.actors[rng.IntN(len(c.actors))]})
	}
	var pairs []story
	for _, a := range c.actors {
		for _, ra := range c.remotes {
			pairs = append(pairs, story{kind: storyFollow, actor: a, target: ra})
		}
	}
	rng.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	out = append(out, pairs[:min(len(pairs), max(1, c.objects/4))]...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// run writes every story, convergeInFlight at once, until all are written
// or ctx ends (a story under way then stops after its current write).
func (c *converger) run(ctx context.Context) {
	stories := c.plan()
	c.mu.Lock()
	c.stats.Stories = len(stories)
	c.mu.Unlock()
	next := make(chan int)
	var wg sync.WaitGroup
	for range convergeInFlight {
		wg.Go(func() {
			for i := range next {
				c.write(ctx, stories[i], rand.New(rand.NewPCG(c.seed, 1000+uint64(i))))
			}
		})
	}
	for i := range stories {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

// write writes one story.
func (c *converger) write(ctx context.Context, s story, rng *rand.Rand) {
	pause := func() bool {
		t := time.NewTimer(randBetween(rng, convergeGapMin, convergeGapMax))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	defer func() {
		c.mu.Lock()
		c.stats.Done++
		c.mu.Unlock()
	}()
	switch s.kind {
	case storyObject:
		c.count(func(st *convergeStats) { st.Objects++ })
		status, body := c.post(ctx, s.actor, map[string]any{
			"@context": activitypub.ActivityStreams, "type": "Note",
			"content": convergeContent(s.n, 0),
			"to":      []string{activitypub.Public}, "cc": []string{s.actor.id + "/followers"},
		})
		if status != http.StatusCreated {
			return // unknown to the writer; courier's database says whether it exists
		}
		act, err := activitypub.ParseActivity(body)
		if err != nil || act.ObjectID == "" {
			c.logger.Warn("convergence write answered 201 without a Create of an object", "err", err)
			return
		}
		updates := 2 + rng.IntN(4)
		for v := 1; v <= updates; v++ {
			if !pause() {
				return
			}
			c.post(ctx, s.actor, map[string]any{
				"@context": activitypub.ActivityStreams, "type": "Update",
				"object": map[string]any{"id": act.ObjectID, "type": "Note", "content": convergeContent(s.n, v)},
			})
		}
		if rng.Float64() < 0.3 && pause() {
			c.post(ctx, s.actor, map[string]any{"@context": activitypub.ActivityStreams, "type": "Delete", "object": act.ObjectID})
		}
	case storyLike:
		c.count(func(st *convergeStats) { st.Likes++ })
		note, ok := c.pickNote(ctx, s.actor, rng)
		if !ok {
			c.count(func(st *convergeStats) { st.Gap++ })
			return
		}
		c.cycles(ctx, s.actor, "Like", note, rng, pause)
	case storyFollow:
		c.count(func(st *convergeStats) { st.Follows++ })
		c.cycles(ctx, s.actor, "Follow", s.target.id, rng, pause)
	}
}

// cycles writes typ of object and its Undo, once or twice; the last Undo
// is left out half the time, so that the story ends standing or not.
func (c *converger) cycles(ctx context.Context, a *localActor, typ, object string, rng *rand.Rand, pause func() bool) {
	n := 1 + rng.IntN(2)
	for i := range n {
		c.post(ctx, a, map[string]any{"@context": activitypub.ActivityStreams, "type": typ, "object": object})
		if i == n-1 && rng.IntN(2) == 0 {
			return
		}
		if !pause() {
			return
		}
		c.post(ctx, a, map[string]any{"@context": activitypub.ActivityStreams, "type": "Undo",
			"object": map[string]any{"type": typ, "object": object}})
		if i < n-1 && !pause() {
			return
		}
	}
}

// pickNote finds a remote note that courier acknowledged likeAfter ago
// (so has most likely imported: a Like of a note courier does not know is
// addressed to no one) and that a has not liked, waiting for one at most
// likeWaitMax.
func (c *converger) pickNote(ctx context.Context, a *localActor, rng *rand.Rand) (string, bool) {
	deadline := time.Now().Add(likeWaitMax)
	for {
		for range 5 {
			if id, ok := c.notes(rng, time.Now().Add(-likeAfter)); ok {
				c.mu.Lock()
				taken := c.liked[relation{a.id, id}]
				c.liked[relation{a.id, id}] = true
				c.mu.Unlock()
				if !taken {
					return id, true
				}
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", false
		case <-t.C:
		}
	}
}

func (c *converger) count(f func(*convergeStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// post sends one write as a, again while it gets no answer, a 5xx or a
// 429 (up to convergeTries), and returns the last status and body. A
// write sent again may have been applied the first time: its story's next
// write follows it either way, so the order written holds.
func (c *converger) post(ctx context.Context, a *localActor, doc map[string]any) (int, []byte) {
	body, _ := json.Marshal(doc) // maps of strings and string slices always marshal
	c.count(func(st *convergeStats) { st.Writes++ })
	status := 0
	var rb []byte
	for try := range convergeTries {
		if try > 0 {
			t := time.NewTimer(300*time.Millisecond + time.Duration(try)*300*time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				c.count(func(st *convergeStats) { st.Unanswered++ })
				return 0, nil
			case <-t.C:
			}
		}
		status, rb = c.once(ctx, a, body)
		if status != 0 && status < 500 && status != http.StatusTooManyRequests {
			break
		}
	}
	c.count(func(st *convergeStats) {
		switch {
		case status == http.StatusCreated:
			st.Acked++
		case status == http.StatusNotFound, status == http.StatusConflict, status == http.StatusGone:
			// A retried write that had been applied (409: liked already,
			// 410: deleted already), or an Undo of a Like or Follow whose
			// write was not.
		case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
			st.Refused++
			if st.Refused <= 3 {
				c.logger.Warn("convergence write refused", "status", status, "actor", a.name, "body", string(bytes.TrimSpace(rb)))
			}
		default:
			st.Unanswered++
		}
	})
	return status, rb
}

func (c *converger) once(ctx context.Context, a *localActor, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, c.base+"/users/"+a.name+"/outbox", bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", activitypub.ContentType)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	return resp.StatusCode, rb
}

func (c *converger) snapshot() convergeStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
