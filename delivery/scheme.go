package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/sqldb"
)

// Scheme is an HTTP signature scheme courier signs a delivery with.
type Scheme string

// The schemes, from the most to the least preferred once a host is known
// to accept RFC 9421.
const (
	// SchemeRFC9421Ed25519 is RFC 9421 with the actor's Ed25519 key.
	SchemeRFC9421Ed25519 Scheme = "rfc9421-ed25519"
	// SchemeRFC9421 is RFC 9421 with the actor's RSA key (rsa-v1_5-sha256).
	SchemeRFC9421 Scheme = "rfc9421-rsa"
	// SchemeCavage is draft-cavage HTTP Signatures with the RSA key.
	SchemeCavage Scheme = "draft-cavage"
)

// SchemeMemory is how long what a host accepts or refuses is remembered;
// past it the host is treated as unknown again.
const SchemeMemory = 30 * 24 * time.Hour

// NoFallbackMemory is how long a host that refused every scheme of one
// attempt with 400 or 401 gets a single POST per attempt: its refusals
// had nothing to do with signatures, and falling back would only double
// its traffic. It is shorter than SchemeMemory so that a host whose
// trouble was passing soon gets the fallback again.
const NoFallbackMemory = 24 * time.Hour

// Values of delivery_signature_schemes' rfc9421 and ed25519 columns and of
// learned_from.
const (
	schemeAccepted = "accepted"
	schemeRefused  = "refused"
	learnedInbound = "inbound"
	learnedPOST    = "delivery"
)

// SchemeStatus is what courier knows of one host's signature schemes, as
// the admin API shows it.
type SchemeStatus struct {
	Host string `json:"host"`
	// RFC9421 and Ed25519 are "accepted", "refused" or "" (unknown or
	// expired), each until the time beside it.
	RFC9421      string     `json:"rfc9421"`
	RFC9421Until *time.Time `json:"rfc9421_until,omitempty"`
	Ed25519      string     `json:"ed25519"`
	Ed25519Until *time.Time `json:"ed25519_until,omitempty"`
	// LearnedFrom is "inbound" (the host sent a verified RFC 9421
	// signature) or "delivery" (courier's own POSTs taught it).
	LearnedFrom string    `json:"learned_from"`
	UpdatedAt   time.Time `json:"updated_at"`
	// NoFallbackUntil, when set, is the time until which a delivery to the
	// host sends one POST, in the first scheme of its order, without
	// falling back on a 400 or 401: every scheme of an attempt was refused
	// so, and falling back did not help.
	NoFallbackUntil *time.Time `json:"no_fallback_until,omitempty"`
	// Order is the schemes a delivery to the host tries now, in order.
	Order []Scheme `json:"order"`
}

// Schemes remembers, per remote host, which signature scheme it accepts,
// in the database (so that an inbox process and a worker process share
// it) with a short-lived copy in memory. A host not yet known gets
// draft-cavage first, with RFC 9421 as the fallback after a 400 or 401; a
// host known to accept RFC 9421 gets it, with Ed25519 unless the host
// refused that, falling back down the list on a 400 or 401. It is safe for
// concurrent use.
type Schemes struct {
	db  *sqldb.DB
	now func() time.Time
	ttl time.Duration
	log *slog.Logger

	mu sync.Mutex
	m  map[string]schemeEntry

	readScheme *readStmt // sqlReadScheme
}

type schemeEntry struct {
	st     SchemeStatus
	found  bool
	readAt time.Time
}

// maxSchemeHosts bounds the in-memory copy; when full it is cleared.
const maxSchemeHosts = 10000

func newSchemes(db *sqldb.DB, now func() time.Time, ttl time.Duration, log *slog.Logger) *Schemes {
	return &Schemes{db: db, now: now, ttl: ttl, log: log, m: map[string]schemeEntry{},
		readScheme: newReadStmt(db.Read, sqlReadScheme, log)}
}

// order returns the schemes to try for host, in order, given st: one
// scheme only while falling back is known not to help.
func (st SchemeStatus) order() []Scheme {
	o := st.fullOrder()
	if st.NoFallbackUntil != nil {
		return o[:1]
	}
	return o
}

func (st SchemeStatus) fullOrder() []Scheme {
	switch st.RFC9421 {
	case schemeAccepted:
		if st.Ed25519 == schemeRefused {
			return []Scheme{SchemeRFC9421, SchemeCavage}
		}
		return []Scheme{SchemeRFC9421Ed25519, SchemeRFC9421, SchemeCavage}
	case schemeRefused:
		return []Scheme{SchemeCavage}
	}
	return []Scheme{SchemeCavage, SchemeRFC9421}
}

// expire clears what st knows past its time.
func (st *SchemeStatus) expire(now time.Time) {
	if st.RFC9421Until != nil && !now.Before(*st.RFC9421Until) {
		st.RFC9421, st.RFC9421Until = "", nil
	}
	if st.Ed25519Until != nil && !now.Before(*st.Ed25519Until) {
		st.Ed25519, st.Ed25519Until = "", nil
	}
	if st.NoFallbackUntil != nil && !now.Before(*st.NoFallbackUntil) {
		st.NoFallbackUntil = nil
	}
}

// Order returns the schemes a delivery to host tries, in order.
func (s *Schemes) Order(ctx context.Context, host string) ([]Scheme, error) {
	st, _, err := s.status(ctx, NormalizeHost(host, ""))
	if err != nil {
		return nil, err
	}
	return st.Order, nil
}

// Status returns what is known of host; found is false for a host courier
// has learnt nothing of.
func (s *Schemes) Status(ctx context.Context, host string) (SchemeStatus, bool, error) {
	return s.status(ctx, NormalizeHost(host, ""))
}

func (s *Schemes) status(ctx context.Context, host string) (SchemeStatus, bool, error) {
	now := s.now()
	s.mu.Lock()
	e, ok := s.m[host]
	s.mu.Unlock()
	if !ok || now.Sub(e.readAt) >= s.ttl || now.Before(e.readAt) {
		st, found, err := s.readStatus(ctx, host)
		if err != nil {
			return SchemeStatus{}, false, err
		}
		e = schemeEntry{st: st, found: found, readAt: now}
		s.put(host, e)
	}
	st := e.st
	st.expire(now)
	st.Order = st.order()
	return st, e.found, nil
}

func (s *Schemes) put(host string, e schemeEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSchemeHosts {
		clear(s.m)
	}
	s.m[host] = e
}

const schemeColumns = `host, rfc9421, rfc9421_until, ed25519, ed25519_until, learned_from, updated_at, no_fallback_until`

// Statements of a scheme's read; update reads the row locked. SQLite's
// transaction holds the file's write lock from its first statement, so the
// plain read is alone; PostgreSQL locks the row (which update makes first
// if missing), so two processes learning of one host at once both count.
const (
	sqlReadScheme         = `SELECT ` + schemeColumns + ` FROM delivery_signature_schemes WHERE host = ?`
	sqlLockSchemeSQLite   = sqlReadScheme
	sqlLockSchemePostgres = sqlReadScheme + ` FOR UPDATE`
	sqlEnsureScheme       = `INSERT INTO delivery_signature_schemes (host, updated_at) VALUES (?, ?)
		ON CONFLICT (host) DO NOTHING`
)

// readStatus reads host's row on the read pool (every fan-out reads the
// row of each of its hosts once the memory copy is older than the TTL).
func (s *Schemes) readStatus(ctx context.Context, host string) (SchemeStatus, bool, error) {
	return schemeRow(s.readScheme.QueryRowContext(ctx, host), host)
}

// schemeRow scans host's row; false when there is none.
func schemeRow(row *sql.Row, host string) (SchemeStatus, bool, error) {
	st, err := scanScheme(row)
	if errors.Is(err, sql.ErrNoRows) {
		return SchemeStatus{Host: host}, false, nil
	}
	if err != nil {
		return SchemeStatus{}, false, fmt.Errorf("delivery: signature scheme of %s: %w", host, err)
	}
	return st, true, nil
}

func scanScheme(row interface{ Scan(...any) error }) (SchemeStatus, error) {
	var st SchemeStatus
	var rfc, ed sql.NullString
	var rfcUntil, edUntil, noFallback sql.NullInt64
	var updated int64
	if err := row.Scan(&st.Host, &rfc, &rfcUntil, &ed, &edUntil, &st.LearnedFrom, &updated, &noFallback); err != nil {
		return SchemeStatus{}, err
	}
	st.RFC9421, st.Ed25519 = rfc.String, ed.String
	if rfcUntil.Valid {
		t := time.UnixMilli(rfcUntil.Int64).UTC()
		st.RFC9421Until = &t
	}
	if edUntil.Valid {
		t := time.UnixMilli(edUntil.Int64).UTC()
		st.Ed25519Until = &t
	}
	if noFallback.Valid {
		t := time.UnixMilli(noFallback.Int64).UTC()
		st.NoFallbackUntil = &t
	}
	st.UpdatedAt = time.UnixMilli(updated).UTC()
	return st, nil
}

// List returns what is known of every host sorted after after, at most
// limit (default 100, at most 1000) of them.
func (s *Schemes) List(ctx context.Context, after string, limit int) ([]SchemeStatus, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	rows, err := s.db.Read.QueryContext(ctx, `SELECT `+schemeColumns+` FROM delivery_signature_schemes
		WHERE host > ? ORDER BY host LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("delivery: signature schemes: %w", err)
	}
	defer rows.Close()
	now := s.now()
	var out []SchemeStatus
	for rows.Next() {
		st, err := scanScheme(rows)
		if err != nil {
			return nil, fmt.Errorf("delivery: signature schemes: %w", err)
		}
		st.expire(now)
		st.Order = st.order()
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("delivery: signature schemes: %w", err)
	}
	return out, nil
}

// AcceptsRFC9421 records that host sent a request whose RFC 9421
// signature verified, with algorithm alg: the host accepts RFC 9421, and
// Ed25519 too when it signed with it. The inbox calls it; a host already
// known for the rest of most of SchemeMemory costs no write.
func (s *Schemes) AcceptsRFC9421(ctx context.Context, host, alg string) {
	host = NormalizeHost(host, "")
	if host == "" {
		return
	}
	st, _, err := s.status(ctx, host)
	if err == nil {
		now := s.now()
		fresh := func(state string, until *time.Time) bool {
			return state == schemeAccepted && until != nil && until.Sub(now) > SchemeMemory/2
		}
		if fresh(st.RFC9421, st.RFC9421Until) && (alg != activitypub.AlgEd25519 || fresh(st.Ed25519, st.Ed25519Until)) {
			return
		}
	}
	ed := ""
	if alg == activitypub.AlgEd25519 {
		ed = schemeAccepted
	}
	if err := s.learn(ctx, host, schemeAccepted, ed, learnedInbound); err != nil && ctx.Err() == nil {
		// Losing this only costs a fallback later.
		s.log.WarnContext(ctx, "delivery: remember signature scheme", "host", host, "err", err)
	}
}

// observe learns from one delivery's POSTs to host: accepted is the scheme
// answered 2xx ("" when none was), refused the schemes answered 400 or 401
// before it. A refusal of a scheme is remembered only when another scheme
// was then accepted, so a host that refuses everything (a key it cannot
// fetch, a blocked actor, an activity it rejects) teaches nothing of its
// schemes; when it refused more than one, that falling back does not help
// it is remembered for NoFallbackMemory.
func (s *Schemes) observe(ctx context.Context, host string, accepted Scheme, refused []Scheme) error {
	if accepted == "" {
		if len(refused) < 2 {
			return nil
		}
		return s.learnNoFallback(ctx, host)
	}
	rfc, ed := "", ""
	switch accepted {
	case SchemeRFC9421Ed25519:
		rfc, ed = schemeAccepted, schemeAccepted
	case SchemeRFC9421:
		rfc = schemeAccepted
	}
	for _, r := range refused {
		switch {
		case r == SchemeRFC9421Ed25519 && accepted == SchemeRFC9421:
			ed = schemeRefused
		case r == SchemeRFC9421Ed25519 || r == SchemeRFC9421:
			if accepted == SchemeCavage {
				rfc = schemeRefused
			}
		}
	}
	if rfc == "" && ed == "" {
		return nil
	}
	st, _, err := s.status(ctx, host)
	if err == nil && st.RFC9421 == rfc && (ed == "" || st.Ed25519 == ed) &&
		st.RFC9421Until != nil && st.RFC9421Until.Sub(s.now()) > SchemeMemory/2 {
		return nil // nothing new
	}
	return s.learn(ctx, host, rfc, ed, learnedPOST)
}

// learnNoFallback remembers for NoFallbackMemory that falling back does
// not help host, leaving what is known of its schemes alone.
func (s *Schemes) learnNoFallback(ctx context.Context, host string) error {
	return s.update(ctx, host, func(st *SchemeStatus, now time.Time) {
		t := time.UnixMilli(now.Add(NoFallbackMemory).UnixMilli()).UTC()
		st.NoFallbackUntil = &t
		if st.LearnedFrom == "" {
			st.LearnedFrom = learnedPOST
		}
	})
}

// learn stores rfc and ed (each "" to leave that column alone) for host,
// each until SchemeMemory from now.
func (s *Schemes) learn(ctx context.Context, host, rfc, ed, from string) error {
	return s.update(ctx, host, func(st *SchemeStatus, now time.Time) {
		until := now.Add(SchemeMemory).UnixMilli()
		if rfc != "" {
			t := time.UnixMilli(until).UTC()
			st.RFC9421, st.RFC9421Until = rfc, &t
		}
		if ed != "" {
			t := time.UnixMilli(until).UTC()
			st.Ed25519, st.Ed25519Until = ed, &t
		}
		if rfc == schemeRefused {
			// Without RFC 9421 there is no Ed25519 either.
			st.Ed25519, st.Ed25519Until = "", nil
		}
		if from == learnedPOST {
			// A scheme was accepted after another was refused: falling
			// back helps this host after all.
			st.NoFallbackUntil = nil
		}
		st.LearnedFrom = from
	})
}

// update changes what is known of host by change, given the time, in one
// write transaction, and stores it.
func (s *Schemes) update(ctx context.Context, host string, change func(st *SchemeStatus, now time.Time)) error {
	now := s.now()
	var st SchemeStatus
	lock := sqlLockSchemeSQLite
	if s.db.Postgres() {
		lock = sqlLockSchemePostgres
	}
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlEnsureScheme, host, now.UnixMilli()); err != nil {
			return err
		}
		var err error
		if st, _, err = schemeRow(tx.QueryRowContext(ctx, lock, host), host); err != nil {
			return err
		}
		st.expire(now)
		change(&st, now)
		st.UpdatedAt = now.UTC()
		nullable := func(state string, t *time.Time) (any, any) {
			if state == "" {
				return nil, nil
			}
			return state, t.UnixMilli()
		}
		r, ru := nullable(st.RFC9421, st.RFC9421Until)
		e, eu := nullable(st.Ed25519, st.Ed25519Until)
		var nf any
		if st.NoFallbackUntil != nil {
			nf = st.NoFallbackUntil.UnixMilli()
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO delivery_signature_schemes
			(host, rfc9421, rfc9421_until, ed25519, ed25519_until, learned_from, updated_at, no_fallback_until)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (host) DO UPDATE SET rfc9421 = excluded.rfc9421, rfc9421_until = excluded.rfc9421_until,
			ed25519 = excluded.ed25519, ed25519_until = excluded.ed25519_until,
			learned_from = excluded.learned_from, updated_at = excluded.updated_at,
			no_fallback_until = excluded.no_fallback_until`,
			host, r, ru, e, eu, st.LearnedFrom, now.UnixMilli(), nf)
		return err
	})
	if err != nil {
		return fmt.Errorf("delivery: learn signature scheme of %s: %w", host, err)
	}
	s.put(host, schemeEntry{st: st, found: true, readAt: now})
	return nil
}

// Forget removes what is known of host, which then starts again with
// draft-cavage.
func (s *Schemes) Forget(ctx context.Context, host string) error {
	host = NormalizeHost(host, "")
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM delivery_signature_schemes WHERE host = ?`, host)
		return err
	})
	if err != nil {
		return fmt.Errorf("delivery: forget signature scheme of %s: %w", host, err)
	}
	s.mu.Lock()
	delete(s.m, host)
	s.mu.Unlock()
	return nil
}

// signAs signs req as sig with scheme. A scheme the actor has no key for
// (Ed25519 for an actor without one) is ErrSign.
func signAs(req *http.Request, body []byte, sig activitypub.Signer, scheme Scheme, now time.Time) error {
	switch scheme {
	case SchemeRFC9421Ed25519:
		return sig.SignMessageEd25519(req, body, now)
	case SchemeRFC9421:
		return sig.SignMessage(req, body, now)
	}
	return sig.Sign(req, body, now)
}

// refusesScheme reports whether a POST answered status may have been
// refused for its signature scheme, so the next scheme is worth a try.
func refusesScheme(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusUnauthorized
}

// schemeOrder returns the signature schemes a delivery to host is to
// get, in order (draft-cavage alone when they cannot be read).
func (s *Service) schemeOrder(ctx context.Context, host string, sig activitypub.Signer) []Scheme {
	order, err := s.schemes.Order(ctx, host)
	if err != nil {
		s.log.WarnContext(ctx, "delivery: signature scheme unknown; draft-cavage", "host", host, "err", err)
		order = []Scheme{SchemeCavage}
	}
	if sig.Ed25519 == nil && len(order) > 0 && order[0] == SchemeRFC9421Ed25519 {
		if len(order) == 1 {
			order = []Scheme{SchemeRFC9421} // no fallback: RSA in its place
		} else {
			order = order[1:]
		}
	}
	if len(order) == 0 {
		order = []Scheme{SchemeCavage}
	}
	return order
}

// sendLearning sends p's POST, signed in the first scheme of p.order: on a
// 400 or 401 it signs again in the next scheme and tries at once, within
// the same attempt, and the schemes learnt from the answers are
// remembered. It returns the last POST's answer.
func (s *Service) sendLearning(ctx context.Context, host string, p *prepared) (int, http.Header, error) {
	if p.client != nil {
		return s.sendWith(p.client, p.req.WithContext(ctx))
	}
	var refused []Scheme
	status, header, err := s.send(p.req.WithContext(ctx))
	for i := 0; err == nil && refusesScheme(status); i++ {
		refused = append(refused, p.order[i])
		if i+1 >= len(p.order) {
			break
		}
		var req *http.Request
		if req, err = s.newPost(p.req.URL.String(), p.body, p.sig, p.order[i+1], p.sync); err != nil {
			break
		}
		status, header, err = s.send(req.WithContext(ctx))
	}
	var accepted Scheme
	switch {
	case err == nil && status >= 200 && status < 300:
		accepted = p.order[len(refused)]
	case err == nil && len(refused) == len(p.order):
		// Every scheme refused: observe remembers that falling back
		// does not help.
	default:
		return status, header, err
	}
	if lerr := s.schemes.observe(ctx, host, accepted, refused); lerr != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "delivery: remember signature scheme", "host", host, "err", lerr)
	}
	return status, header, err
}

// Schemes returns the per-host signature schemes, for the inbox (which
// reports verified RFC 9421 signatures) and the admin API.
func (s *Service) Schemes() *Schemes { return s.schemes }
