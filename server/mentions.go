package server

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// Mentions of a client's object named @user@host without an href are
// looked up by WebFinger (Config.Mentions). An object is refused (422)
// when it mentions more than MaxMentions distinct names or hrefs, before
// any lookup; a name mentioned twice is looked up once; the lookups of one
// write run side by side, at most mentionLookups at once; and their
// answers are kept (mentionCache): an account for mentionFoundTTL, "no such
// account" for mentionMissingTTL. A lookup that fails for a temporary
// reason is not kept.
const (
	// MaxMentions bounds the distinct actors one object may mention.
	MaxMentions = 100

	mentionLookups     = 8
	mentionCacheSize   = 4096
	mentionFoundTTL    = 10 * time.Minute
	mentionMissingTTL  = time.Minute
	mentionLookupLimit = 10 * time.Second // one lookup's bound
)

// mentionRef is one Mention tag as read: its href, or the name to look up.
type mentionRef struct {
	tag        int    // the tag's index, for messages
	href       string // given, or resolved
	name       string // @user@host as written
	user, host string
}

// key is the cache's and the deduplication's key of a looked-up name.
func (m mentionRef) key() string { return strings.ToLower(m.user + "@" + m.host) }

// readMention reads the Mention tag t (index i): its href, checked, or its
// name @user@host to look up; a local name is resolved by the store here.
func (s *Server) readMention(r *http.Request, i int, t map[string]any) (mentionRef, error) {
	m := mentionRef{tag: i}
	if href, _ := t["href"].(string); href != "" {
		u, err := url.Parse(href)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return m, store.Errorf(store.EUNPROCESSABLE, "tag %d: Mention href %q is not an actor id", i, href)
		}
		if s.uris.IsLocal(href) {
			if _, err := s.localActorByURI(r, href); err != nil {
				return m, store.Errorf(store.EUNPROCESSABLE, "tag %d: Mention href %q is no local actor", i, href)
			}
		}
		m.href = href
		return m, nil
	}
	name, _ := t["name"].(string)
	user, host, err := activitypub.ParseWebFingerResource(name)
	if err != nil || !strings.HasPrefix(name, "@") || strings.Count(name, "@") != 2 {
		return m, store.Errorf(store.EUNPROCESSABLE, "tag %d: a Mention needs an href (an actor id) or a name @user@host", i)
	}
	m.name, m.user, m.host = name, user, host
	if host == strings.ToLower(s.uris.Host()) {
		a, err := s.st.ActorByName(r.Context(), user)
		if err != nil {
			return m, store.Errorf(store.EUNPROCESSABLE, "tag %d: no local actor %q", i, name)
		}
		m.href = a.URI
		return m, nil
	}
	if s.cfg.Mentions == nil {
		return m, store.Errorf(store.EUNPROCESSABLE, "tag %d: Mention %q has no href and this server does not look names up", i, name)
	}
	return m, nil
}

// resolveMentions gives every ref without an href the actor id its name
// names: each distinct name looked up once, from the cache or by
// WebFinger, mentionLookups at a time. The first failure, in tag order, is
// returned.
func (s *Server) resolveMentions(ctx context.Context, refs []mentionRef) error {
	type answer struct {
		id  string
		err error
	}
	answers := map[string]*answer{}
	var keys []string
	for _, m := range refs {
		if m.href != "" {
			continue
		}
		if _, ok := answers[m.key()]; !ok {
			answers[m.key()] = &answer{}
			keys = append(keys, m.key())
		}
	}
	first := map[string]mentionRef{}
	for _, m := range refs {
		if _, ok := first[m.key()]; !ok && m.href == "" {
			first[m.key()] = m
		}
	}
	sem := make(chan struct{}, mentionLookups)
	var wg sync.WaitGroup
	for _, k := range keys {
		if id, err, ok := s.mentions.get(k, s.cfg.Now()); ok {
			answers[k].id, answers[k].err = id, err
			continue
		}
		a, m := answers[k], first[k]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			lctx, cancel := context.WithTimeout(ctx, mentionLookupLimit)
			defer cancel()
			a.id, a.err = s.cfg.Mentions(lctx, m.user, m.host)
			if a.err == nil || mentionMissing(a.err) {
				ttl := mentionFoundTTL
				if a.err != nil {
					ttl = mentionMissingTTL
				}
				s.mentions.put(k, a.id, a.err, s.cfg.Now(), ttl)
			}
		}()
	}
	wg.Wait()
	for i := range refs {
		m := &refs[i]
		if m.href != "" {
			continue
		}
		a := answers[m.key()]
		if a.err != nil {
			return s.mentionError(ctx, *m, a.err)
		}
		m.href = a.id
	}
	return nil
}

// mentionMissing reports whether err says the account does not exist (a
// lasting answer, kept in the cache) rather than that the lookup failed
// for now.
func mentionMissing(err error) bool {
	if errors.Is(err, activitypub.ErrNotFound) || errors.Is(err, activitypub.ErrBadURL) || errors.Is(err, activitypub.ErrTooLarge) {
		return true
	}
	var se *activitypub.StatusError
	return errors.As(err, &se) && se.Status >= 400 && se.Status < 500 && se.Status != http.StatusTooManyRequests
}

// mentionError is the answer to a failed lookup of m: 422 for an account
// that does not exist, 503 for a lookup that may succeed later.
func (s *Server) mentionError(ctx context.Context, m mentionRef, err error) error {
	switch {
	case errors.Is(err, activitypub.ErrNotFound), errors.Is(err, activitypub.ErrBadURL), errors.Is(err, activitypub.ErrTooLarge):
		return store.Errorf(store.EUNPROCESSABLE, "tag %d: Mention %q: no such account", m.tag, m.name)
	}
	var se *activitypub.StatusError
	if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 && se.Status != http.StatusTooManyRequests {
		return store.Errorf(store.EUNPROCESSABLE, "tag %d: Mention %q: WebFinger answered %d", m.tag, m.name, se.Status)
	}
	s.log.InfoContext(ctx, "client write: mention lookup failed", "mention", m.name, "err", err)
	return store.Errorf(httpedge.EUnavailable, "Mention %q could not be looked up now; try again later", m.name)
}

// mentionCache keeps WebFinger answers for mentions, at most
// mentionCacheSize, each until its expiry.
type mentionCache struct {
	mu sync.Mutex
	m  map[string]mentionEntry
}

type mentionEntry struct {
	id      string
	err     error
	expires time.Time
}

func (c *mentionCache) get(key string, now time.Time) (string, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !now.Before(e.expires) {
		return "", nil, false
	}
	return e.id, e.err, true
}

func (c *mentionCache) put(key, id string, err error, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]mentionEntry{}
	}
	if len(c.m) >= mentionCacheSize {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < mentionCacheSize {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = mentionEntry{id: id, err: err, expires: now.Add(ttl)}
}
