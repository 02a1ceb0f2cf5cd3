package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"sync"
	"time"
)

// Session bounds: the defaults of Config.SessionIdle, Config.SessionMax and
// Config.MaxSessions.
const (
	// DefaultSessionIdle ends a session nobody used for this long.
	DefaultSessionIdle = 2 * time.Hour
	// DefaultSessionMax ends every session this long after sign-in.
	DefaultSessionMax = 12 * time.Hour
	// DefaultMaxSessions bounds the sessions kept at once; signing in past
	// it ends the least recently used.
	DefaultMaxSessions = 1000
)

// sessions are the console's signed-in browsers, kept in memory only. The
// cookie carries a random 256-bit id, never the admin token; the server
// keeps, under a hash of the id, the token the session calls the admin API
// with and the session's own random CSRF token. Signing out removes the
// entry, so a copied cookie stops working at once; an entry also ends after
// idle time without use or max time after sign-in, and when the admin API
// refuses its token (the token changed). A restart ends every session: the
// operators sign in again, which is the behaviour wanted when the token
// may have changed with the restart.
type sessions struct {
	now  func() time.Time
	idle time.Duration
	max  time.Duration
	cap  int

	mu sync.Mutex
	m  map[string]*sessionEntry // by idKey(id)
}

type sessionEntry struct {
	token    string
	csrf     string
	created  time.Time
	lastSeen time.Time
}

func newSessions(now func() time.Time, idle, max time.Duration, capacity int) *sessions {
	return &sessions{now: now, idle: idle, max: max, cap: capacity, m: map[string]*sessionEntry{}}
}

// idKey is the map key of a session id: its SHA-256, so that the ids
// themselves are nowhere in memory but in the browsers' cookies.
func idKey(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

func randomString(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// create starts a session for token and returns its id.
func (s *sessions) create(token string) (string, error) {
	id, err := randomString(32)
	if err != nil {
		return "", err
	}
	c := make([]byte, 32)
	if _, err := rand.Read(c); err != nil {
		return "", err
	}
	csrf := hex.EncodeToString(c)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	for len(s.m) >= s.cap {
		oldest, at := "", time.Time{}
		for k, e := range s.m {
			if oldest == "" || e.lastSeen.Before(at) {
				oldest, at = k, e.lastSeen
			}
		}
		delete(s.m, oldest)
	}
	s.m[idKey(id)] = &sessionEntry{token: token, csrf: csrf, created: now, lastSeen: now}
	return id, nil
}

// get returns the session of id, renewing its idle time; ok is false for
// an id that is unknown, signed out or expired.
func (s *sessions) get(id string) (session, bool) {
	if id == "" {
		return session{}, false
	}
	now := s.now()
	k := idKey(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[k]
	if !ok {
		return session{}, false
	}
	if s.expired(e, now) {
		delete(s.m, k)
		return session{}, false
	}
	e.lastSeen = now
	return session{id: id, token: e.token, csrf: e.csrf}, true
}

// end removes the session of id (sign-out, or a token the API refused).
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, idKey(id))
}

// len is the number of sessions kept, expired ones not yet swept included.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *sessions) expired(e *sessionEntry, now time.Time) bool {
	return now.Sub(e.lastSeen) >= s.idle || now.Sub(e.created) >= s.max
}

func (s *sessions) sweepLocked(now time.Time) {
	for k, e := range s.m {
		if s.expired(e, now) {
			delete(s.m, k)
		}
	}
}
