package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL's driver, registered as "pgx"
	_ "modernc.org/sqlite"             // the driver courier itself uses, registered as "sqlite"

	"github.com/courier-ap/courier/postgres"
)

// follow is a Follow a remote actor sent that courier acknowledged.
type follow struct {
	id    string // the Follow's id, the object of courier's Accept
	host  string // the follower's host:port
	local string // the local actor followed
}

// world is what the run knows independently of courier: who follows whom,
// which host is black-holed, what was written and sent.
type world struct {
	bus       string
	blackHole string // host:port of the black-holed host
	follows   map[string]follow
	// followerHosts maps a local actor id to the hosts of its followers.
	followerHosts map[string]map[string]bool
}

func newWorld(bus, blackHole string) *world {
	return &world{bus: bus, blackHole: blackHole, follows: map[string]follow{}, followerHosts: map[string]map[string]bool{}}
}

func (w *world) addFollow(f follow) {
	w.follows[f.id] = f
	if w.followerHosts[f.local] == nil {
		w.followerHosts[f.local] = map[string]bool{}
	}
	w.followerHosts[f.local][f.host] = true
}

// Report is the outcome of a run: the figures of the one line it prints
// and what decides its exit status.
type Report struct {
	Bus     string
	Store   string // "sqlite" or "postgres"
	Seed    uint64
	Elapsed time.Duration

	// Written counts the activities courier built for its local actors
	// (read from its database): Creates of the notes written and Accepts of
	// the follows received.
	Written, Creates, Accepts int
	// OtherActivities counts local activities of other types (none are
	// expected).
	OtherActivities int
	// WritesAcked counts client writes courier answered 201;
	// WritesUnanswered those that got no answer or a 5xx (their fate is
	// read from the database); WritesRefused those answered 4xx.
	WritesAcked, WritesUnanswered, WritesRefused int
	// AckedMissing counts acknowledged writes whose activity is not in the
	// database: lost writes.
	AckedMissing int

	// PairsExpected counts the (activity, remote inbox) pairs that must be
	// delivered, black-holed host excluded; PairsReceived how many of them
	// arrived, PairsLost how many did not.
	PairsExpected, PairsReceived, PairsLost int
	// MaxIDsPerPair is the most distinct activity ids one remote inbox got
	// for one logical activity (the same note's Create, the same follow's
	// Accept): more than 1 means an activity was rebuilt with a new id.
	MaxIDsPerPair int
	// DuplicatePOSTs counts POSTs of an activity id to an inbox that had it
	// already (allowed: at-least-once delivery).
	DuplicatePOSTs int
	// UnexpectedPOSTs counts recorded POSTs of activities that are not
	// courier's local activities or that went to hosts not in their
	// audience.
	UnexpectedPOSTs int
	// BadSignatures counts POSTs whose signature or digest did not verify.
	BadSignatures int64

	// BlackHolePairs counts the pairs addressed to the black-holed host:
	// BlackHoleDead were dead-lettered, BlackHoleParked are parked, and
	// BlackHoleOther are neither (still retrying, or not fanned out).
	BlackHolePairs, BlackHoleDead, BlackHoleParked, BlackHoleOther int

	// InboundSent counts the inbound activities (Creates of notes and
	// Likes) courier acknowledged with 202; InboundUnacked those it never
	// acknowledged (still refused or unreachable at the end);
	// InboundRefused those answered 4xx.
	InboundSent, InboundUnacked, InboundRefused int
	// InboundResent counts deliberate repeats of acknowledged activities.
	InboundResent int
	// ImportedOnce counts inbound activities whose effect is in the
	// database exactly once; ImportedTwice those whose effect is there more
	// than once (a note stored twice, a like counted twice); InboundLost
	// those acknowledged but never imported.
	ImportedOnce, ImportedTwice, InboundLost int
	// LedgerNotDone counts imported activities whose import handler has no
	// done row in the processed-events ledger (informational: a crash
	// between the import and the ledger mark leaves the claim to expire).
	LedgerNotDone int

	// DeadLetters counts dead-lettered events (outbox rows, JetStream
	// terminations and deliveries given up), Reasons their reasons, and
	// ForeignDeadLetters those that do not belong to the black-holed host.
	DeadLetters, ForeignDeadLetters int
	Reasons                         map[string]int

	// Chaos applied.
	WorkerKills, ServerKills, ServerTerms, BrokerStops, SelfExits int
	// Servers and Workers are the processes of each kind. PGRestarts
	// counts restarts of PostgreSQL, DBCuts the cuts of a worker from it,
	// and CutMethod says how the cuts were made ("netns": a veth link of
	// the server's network namespace taken down; "proxy": a TCP proxy
	// stopped forwarding).
	Servers, Workers   int
	PGRestarts, DBCuts int
	CutMethod          string

	// Converge is set on a convergence run (Config.Converge), which fills
	// the figures below. Stories counts the stories planned (an object's
	// Create, Updates and Delete; a Like and its Undo; a Follow and its
	// Undo), StoriesDone those written to their end or stopped by the
	// write phase's bound; ConvergeWrites the client writes they sent,
	// ConvergeAcked those courier answered 201, ConvergeUnanswered those
	// left without an answer or with a 5xx after every try,
	// ConvergeRefused those answered 4xx other than 404, 409 and 410.
	// NoNoteToLike counts like stories that found no remote note to like.
	Converge                                          bool
	Stories, StoriesDone                              int
	ConvergeWrites, ConvergeAcked, ConvergeUnanswered int
	ConvergeRefused, NoNoteToLike                     int
	// Arrivals counts the activities of the stories the remote inboxes
	// accepted (each one at each inbox, duplicates included): what the
	// check applied. ViewDivergences counts differences between a host's
	// final view and courier's state (Resurrected: a deleted object held;
	// LostEdits: an object held at another version; MissingObjects: an
	// object not held; RelationDivergences: a Like or Follow standing on
	// one side only); OrderViolations the arrivals out of order per
	// (object, inbox). FirstDivergences describes the first few.
	Arrivals, ViewDivergences, OrderViolations                  int
	Resurrected, LostEdits, MissingObjects, RelationDivergences int
	FirstDivergences                                            []string
	// Outages counts the outages of chaotic hosts.
	Outages int

	// Quiescent is false when the settle phase hit its deadline.
	Quiescent bool
}

// Divergences is the convergence check's total: view divergences and
// order violations.
func (r *Report) Divergences() int { return r.ViewDivergences + r.OrderViolations }

// Line renders the report as the one line of figures the run prints.
func (r *Report) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos bus=%s", r.Bus)
	if r.Store == "postgres" {
		fmt.Fprintf(&b, " store=%s servers=%d workers=%d", r.Store, r.Servers, r.Workers)
	}
	fmt.Fprintf(&b, " seed=%d elapsed=%s", r.Seed, r.Elapsed.Round(time.Second))
	fmt.Fprintf(&b, " written=%d (creates=%d accepts=%d) writes_acked=%d unanswered=%d refused=%d acked_missing=%d",
		r.Written, r.Creates, r.Accepts, r.WritesAcked, r.WritesUnanswered, r.WritesRefused, r.AckedMissing)
	fmt.Fprintf(&b, " pairs_expected=%d received=%d lost=%d max_ids_per_pair=%d duplicate_posts=%d unexpected_posts=%d bad_signatures=%d",
		r.PairsExpected, r.PairsReceived, r.PairsLost, r.MaxIDsPerPair, r.DuplicatePOSTs, r.UnexpectedPOSTs, r.BadSignatures)
	fmt.Fprintf(&b, " inbound_sent=%d imported_once=%d imported_twice=%d inbound_lost=%d inbound_unacked=%d inbound_refused=%d inbound_resent=%d ledger_not_done=%d",
		r.InboundSent, r.ImportedOnce, r.ImportedTwice, r.InboundLost, r.InboundUnacked, r.InboundRefused, r.InboundResent, r.LedgerNotDone)
	fmt.Fprintf(&b, " blackhole_pairs=%d dead=%d parked=%d other=%d dead_letters=%d foreign_dead_letters=%d reasons=%s",
		r.BlackHolePairs, r.BlackHoleDead, r.BlackHoleParked, r.BlackHoleOther, r.DeadLetters, r.ForeignDeadLetters, formatReasons(r.Reasons))
	if r.Converge {
		fmt.Fprintf(&b, " stories=%d done=%d converge_writes=%d acked=%d unanswered=%d refused=%d no_note_to_like=%d",
			r.Stories, r.StoriesDone, r.ConvergeWrites, r.ConvergeAcked, r.ConvergeUnanswered, r.ConvergeRefused, r.NoNoteToLike)
		fmt.Fprintf(&b, " arrivals=%d divergences=%d (view=%d resurrected=%d lost_edits=%d missing=%d relations=%d order=%d) outages=%d",
			r.Arrivals, r.Divergences(), r.ViewDivergences, r.Resurrected, r.LostEdits, r.MissingObjects, r.RelationDivergences,
			r.OrderViolations, r.Outages)
	}
	fmt.Fprintf(&b, " worker_sigkills=%d server_sigkills=%d server_sigterms=%d broker_stops=%d",
		r.WorkerKills, r.ServerKills, r.ServerTerms, r.BrokerStops)
	if r.Store == "postgres" {
		fmt.Fprintf(&b, " pg_restarts=%d db_cuts=%d cut=%s", r.PGRestarts, r.DBCuts, r.CutMethod)
	}
	fmt.Fprintf(&b, " self_exits=%d quiescent=%t", r.SelfExits, r.Quiescent)
	return b.String()
}

func formatReasons(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%q:%d", k, m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Failure is nil when the run shows nothing lost, nothing twice and no dead
// letter outside the black-holed host; otherwise it says why, in one line.
func (r *Report) Failure() error {
	var why []string
	if r.PairsLost > 0 {
		why = append(why, fmt.Sprintf("%d (activity, inbox) pairs lost", r.PairsLost))
	}
	if r.AckedMissing > 0 {
		why = append(why, fmt.Sprintf("%d acknowledged writes missing from the database", r.AckedMissing))
	}
	if r.MaxIDsPerPair > 1 {
		why = append(why, fmt.Sprintf("an inbox got %d distinct ids for one activity", r.MaxIDsPerPair))
	}
	if r.ImportedTwice > 0 {
		why = append(why, fmt.Sprintf("%d inbound activities imported twice", r.ImportedTwice))
	}
	if r.InboundLost > 0 {
		why = append(why, fmt.Sprintf("%d acknowledged inbound activities not imported", r.InboundLost))
	}
	if r.InboundUnacked > 0 || r.InboundRefused > 0 {
		why = append(why, fmt.Sprintf("%d inbound activities never accepted (%d refused)", r.InboundUnacked+r.InboundRefused, r.InboundRefused))
	}
	if r.ForeignDeadLetters > 0 {
		why = append(why, fmt.Sprintf("%d dead letters outside the black-holed host", r.ForeignDeadLetters))
	}
	if r.BadSignatures > 0 {
		why = append(why, fmt.Sprintf("%d deliveries failed signature verification", r.BadSignatures))
	}
	if r.Written == 0 || r.PairsExpected == 0 {
		why = append(why, "nothing was written: the run proves nothing")
	}
	if r.Converge && r.Divergences() > 0 {
		why = append(why, fmt.Sprintf("%d divergences from courier's state (%d in the final views, %d arrivals out of order), first: %s",
			r.Divergences(), r.ViewDivergences, r.OrderViolations, strings.Join(r.FirstDivergences, "; ")))
	}
	if r.Converge && r.Arrivals == 0 {
		why = append(why, "no convergence write arrived anywhere: the check proves nothing")
	}
	if len(why) == 0 {
		return nil
	}
	if !r.Quiescent {
		why = append(why, "courier did not settle before the deadline")
	}
	return errors.New(strings.Join(why, "; "))
}

// checkDB is courier's database opened read-only for the checks.
type checkDB struct {
	*sql.DB
	postgres bool // numbered placeholders ($1) instead of ?
}

// openReadOnly opens courier's database for reading beside the running
// processes. A SQLite file: query-only connections with a busy timeout,
// which WAL lets read while courier writes. A postgres:// URL: sessions
// whose transactions are read-only.
func openReadOnly(loc string) (*checkDB, error) {
	if postgres.IsURL(loc) {
		u, err := url.Parse(loc)
		if err != nil {
			return nil, fmt.Errorf("chaos: open database: %w", err)
		}
		q := u.Query()
		q.Set("default_transaction_read_only", "on")
		u.RawQuery = q.Encode()
		db, err := sql.Open("pgx", u.String())
		if err != nil {
			return nil, fmt.Errorf("chaos: open database: %w", err)
		}
		db.SetMaxOpenConns(2)
		return &checkDB{DB: db, postgres: true}, nil
	}
	dsn := (&url.URL{Scheme: "file", Path: loc, RawQuery: url.Values{
		"_pragma": {"busy_timeout(5000)", "query_only(1)"},
	}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("chaos: open database: %w", err)
	}
	db.SetMaxOpenConns(2)
	return &checkDB{DB: db}, nil
}

// snapshot is what the database says at one moment.
type snapshot struct {
	activities []activityRow
	targets    []targetRow
	dead       map[string]deadRow // by event id
	inbox      map[string]inboxRow
	objects    map[string]int    // remote note uri -> rows
	likes      map[string]int    // Like activity uri -> rows
	likesOf    map[string]int    // object uri -> Like rows
	busy       int               // pending/processing rows not of the black-holed host
	ledger     map[string]string // inbox.received event id -> ledger status of the import handler
}

type activityRow struct {
	uri, typ, actor, object string
	withdrawn               bool // undone, or its object deleted
}

type targetRow struct {
	eventID, activity, host string
	parked                  bool
}

type deadRow struct{ eventID, typ, host, reason string }

type inboxRow struct {
	eventID  string
	imported bool
	outcome  string
}

// importHandler is the ledger name of courier's inbound import handler
// (inbox.HandlerImport).
const importHandler = "inbox.import"

// isNoTable tells a missing table (a schema that does not have it yet) from
// other errors: SQLite's message, PostgreSQL's undefined_table (42P01).
func isNoTable(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such table") || strings.Contains(err.Error(), "SQLSTATE 42P01"))
}

// read takes a snapshot of the database.
func read(ctx context.Context, db *checkDB, blackHole string) (*snapshot, error) {
	s := &snapshot{
		dead: map[string]deadRow{}, inbox: map[string]inboxRow{},
		objects: map[string]int{}, likes: map[string]int{}, likesOf: map[string]int{},
		ledger: map[string]string{},
	}
	type query struct {
		name string
		sql  string
		args []any
		scan func(*sql.Rows) error
	}
	queries := []query{
		{"activities", `SELECT uri, type, actor_uri, COALESCE(object_uri, ''), withdrawn_at IS NOT NULL FROM activities WHERE actor_id IS NOT NULL`, nil,
			func(r *sql.Rows) error {
				var a activityRow
				err := r.Scan(&a.uri, &a.typ, &a.actor, &a.object, &a.withdrawn)
				s.activities = append(s.activities, a)
				return err
			}},
		{"delivery_targets", `SELECT event_id, activity_id, host, parked_at IS NOT NULL FROM delivery_targets`, nil,
			func(r *sql.Rows) error {
				var t targetRow
				err := r.Scan(&t.eventID, &t.activity, &t.host, &t.parked)
				s.targets = append(s.targets, t)
				return err
			}},
		{"event_queue dead letters", `SELECT COALESCE(event_id, ''), type, COALESCE(target, ''), COALESCE(last_error, '')
			FROM event_queue WHERE status = 'dead_lettered'`, nil,
			func(r *sql.Rows) error {
				var d deadRow
				if err := r.Scan(&d.eventID, &d.typ, &d.host, &d.reason); err != nil {
					return err
				}
				s.addDead(d)
				return nil
			}},
		{"jetstream_exhausted", `SELECT COALESCE(event_id, ''), COALESCE(event_type, ''), reason || COALESCE(': ' || detail, '')
			FROM jetstream_exhausted`, nil,
			func(r *sql.Rows) error {
				var d deadRow
				if err := r.Scan(&d.eventID, &d.typ, &d.reason); err != nil {
					return err
				}
				s.addDead(d)
				return nil
			}},
		{"delivery_attempts", `SELECT event_id, host, error FROM delivery_attempts WHERE outcome = 'dead'`, nil,
			func(r *sql.Rows) error {
				d := deadRow{typ: "delivery.post"}
				if err := r.Scan(&d.eventID, &d.host, &d.reason); err != nil {
					return err
				}
				s.addDead(d)
				return nil
			}},
		{"inbox_activities", `SELECT activity_id, event_id, imported_at IS NOT NULL, COALESCE(outcome, '') FROM inbox_activities`, nil,
			func(r *sql.Rows) error {
				var id string
				var in inboxRow
				err := r.Scan(&id, &in.eventID, &in.imported, &in.outcome)
				s.inbox[id] = in
				return err
			}},
		{"objects", `SELECT uri, COUNT(*) FROM objects WHERE actor_id IS NULL GROUP BY uri`, nil,
			func(r *sql.Rows) error {
				var uri string
				var n int
				err := r.Scan(&uri, &n)
				s.objects[uri] = n
				return err
			}},
		{"reactions", `SELECT activity_uri, object_uri FROM reactions WHERE type = 'Like'`, nil,
			func(r *sql.Rows) error {
				var id, obj string
				err := r.Scan(&id, &obj)
				s.likes[id]++
				s.likesOf[obj]++
				return err
			}},
		{"processed_events", `SELECT event_id, status FROM processed_events WHERE handler = ?`, []any{importHandler},
			func(r *sql.Rows) error {
				var id, status string
				err := r.Scan(&id, &status)
				s.ledger[id] = status
				return err
			}},
		{"event_queue busy", `SELECT COUNT(*) FROM event_queue q
			WHERE q.status IN ('pending', 'processing')
			AND NOT EXISTS (SELECT 1 FROM delivery_targets t WHERE t.event_id = q.event_id AND t.host = ?)
			AND NOT (q.type = 'delivery.post' AND COALESCE(q.target, '') = ?)`, []any{blackHole, blackHole},
			func(r *sql.Rows) error { return r.Scan(&s.busy) }},
	}
	for _, q := range queries {
		text := q.sql
		if db.postgres {
			text = postgres.Rebind(text)
		}
		err := scanRows(ctx, db, q.name, text, q.args, q.scan)
		if isNoTable(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
	}
	return s, nil
}

// scanRows runs query text (named name in errors) on db and hands each
// row to scan.
func scanRows(ctx context.Context, db *checkDB, name, text string, args []any, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, text, args...)
	if err != nil {
		return fmt.Errorf("chaos: read %s: %w", name, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("chaos: read %s: %w", name, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chaos: read %s: %w", name, err)
	}
	return nil
}

func (s *snapshot) addDead(d deadRow) {
	if d.eventID == "" {
		d.eventID = fmt.Sprintf("unknown-%d", len(s.dead))
	}
	prev, ok := s.dead[d.eventID]
	if !ok {
		s.dead[d.eventID] = d
		return
	}
	if prev.host == "" {
		prev.host = d.host
	}
	if prev.typ == "" {
		prev.typ = d.typ
	}
	if prev.reason == "" {
		prev.reason = d.reason
	}
	s.dead[d.eventID] = prev
}

// reasonOf reduces an error text to a stable reason: the text before the
// first detail that varies (a number, a URL), at most 80 characters.
func reasonOf(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "0123456789"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "http"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimRight(s, " :(\"'.,;-")
	if len(s) > 80 {
		s = s[:80]
	}
	if s == "" {
		return "unknown"
	}
	return s
}

// lastSegment returns the last path segment of an id URL (its UUID for
// courier's activities).
func lastSegment(id string) string {
	u, err := url.Parse(id)
	if err != nil {
		return id
	}
	return path.Base(u.Path)
}

// outcome is the evaluation of one snapshot against what the run knows.
type outcome struct {
	report      Report
	outstanding int // expected things not there yet: pairs, imports, busy outbox rows
}

// evaluate compares the snapshot and the remote inboxes' records with the
// world and fills every figure of the report that the database decides.
func evaluate(w *world, s *snapshot, posts []post, writes writeStats, inbound []inboundActivity, resent int) outcome {
	var o outcome
	r := &o.report
	r.Bus = w.bus
	r.Reasons = map[string]int{}

	// Local activities and the pairs they must reach.
	type pairKey struct{ activity, host string }
	expected := map[pairKey]bool{}
	blackHole := map[pairKey]bool{}
	logical := map[string]string{} // activity uri -> its logical key (type + object)
	inDB := map[string]bool{}
	byUUID := map[string]string{}
	for _, a := range s.activities {
		inDB[a.uri] = true
		byUUID[lastSegment(a.uri)] = a.uri
		logical[a.uri] = a.typ + " " + a.object
		switch a.typ {
		case "Create":
			r.Creates++
			if a.withdrawn {
				// Its object was deleted: a Create not delivered yet is
				// superseded by the Delete, so it may or may not arrive
				// (the convergence check judges what did).
				continue
			}
			for h := range w.followerHosts[a.actor] {
				if h == w.blackHole {
					blackHole[pairKey{a.uri, h}] = true
				} else {
					expected[pairKey{a.uri, h}] = true
				}
			}
		case "Accept":
			r.Accepts++
			if f, ok := w.follows[a.object]; ok {
				expected[pairKey{a.uri, f.host}] = true
			}
		default:
			r.OtherActivities++
		}
	}
	r.Written = r.Creates + r.Accepts + r.OtherActivities
	r.WritesAcked = writes.Acked
	r.WritesUnanswered = writes.Failed
	r.WritesRefused = writes.Rejected
	for id := range writes.AckedIDs {
		if !inDB[id] {
			r.AckedMissing++
		}
	}

	// What the remote inboxes got.
	got := map[pairKey]int{}
	ids := map[string]map[string]bool{} // logical key + host -> activity ids
	for _, p := range posts {
		k := pairKey{p.activityID, p.host}
		got[k]++
		if p.typ != "Create" && p.typ != "Accept" {
			// Updates of one object, Likes and Follows made again after
			// an Undo: distinct activities of one object by design.
			continue
		}
		lk := logical[p.activityID]
		if lk == "" {
			lk = p.typ + " " + p.objectID
		}
		lk += " @" + p.host
		if ids[lk] == nil {
			ids[lk] = map[string]bool{}
		}
		ids[lk][p.activityID] = true
	}
	for k, n := range got {
		r.DuplicatePOSTs += n - 1
		if !expected[k] && !blackHole[k] {
			r.UnexpectedPOSTs++
		}
	}
	for _, set := range ids {
		r.MaxIDsPerPair = max(r.MaxIDsPerPair, len(set))
	}
	r.PairsExpected = len(expected)
	for k := range expected {
		if got[k] > 0 {
			r.PairsReceived++
		}
	}
	r.PairsLost = r.PairsExpected - r.PairsReceived

	// Dead letters, and the fate of the black-holed host's pairs.
	hostOfEvent := map[string]string{}
	activityOfEvent := map[string]string{}
	parked := map[pairKey]bool{}
	for _, t := range s.targets {
		act := t.activity
		if !strings.Contains(act, "://") {
			act = byUUID[act]
		}
		hostOfEvent[t.eventID] = t.host
		activityOfEvent[t.eventID] = act
		if t.parked {
			parked[pairKey{act, t.host}] = true
		}
	}
	deadPairs := map[pairKey]bool{}
	for id, d := range s.dead {
		r.DeadLetters++
		h := hostOfEvent[id]
		if h == "" {
			h = d.host
		}
		r.Reasons[reasonOf(d.reason)]++
		if h != w.blackHole {
			r.ForeignDeadLetters++
		}
		deadPairs[pairKey{activityOfEvent[id], h}] = true
	}
	// Expected pairs whose delivery was dead-lettered will never arrive:
	// they are lost, and nothing is left to wait for.
	deadLost := 0
	for k := range expected {
		if got[k] == 0 && deadPairs[k] {
			deadLost++
		}
	}
	r.BlackHolePairs = len(blackHole)
	for k := range blackHole {
		switch {
		case deadPairs[k]:
			r.BlackHoleDead++
		case parked[k]:
			r.BlackHoleParked++
		default:
			r.BlackHoleOther++
		}
	}

	// Inbound activities and their effects. sentLikes counts the distinct
	// Likes of each note that courier recorded.
	sentLikes := map[string]int{}
	for _, a := range inbound {
		if a.typ == "Follow" {
			continue // set-up traffic, checked by the Accepts
		}
		switch {
		case a.acked:
			r.InboundSent++
		case a.refused != 0:
			r.InboundRefused++
		default:
			r.InboundUnacked++
		}
		row, ok := s.inbox[a.id]
		if !ok {
			if a.acked {
				r.InboundLost++
			}
			continue
		}
		n := 0
		switch a.typ {
		case "Create":
			n = s.objects[a.objectID]
		case "Like":
			n = s.likes[a.id]
			sentLikes[a.objectID]++
		}
		if row.imported && s.ledger[row.eventID] != "done" {
			r.LedgerNotDone++
		}
		switch {
		case n == 1 && row.imported:
			r.ImportedOnce++
		case n > 1:
			r.ImportedTwice++
		default:
			r.InboundLost++ // recorded (so acknowledged, whatever the sender saw) but never applied
		}
	}
	// Like counts: a note's likes must equal the distinct likes sent.
	for obj, n := range sentLikes {
		if s.likesOf[obj] > n {
			r.ImportedTwice += s.likesOf[obj] - n
		}
	}
	r.InboundResent = resent

	// The black-holed host's deliveries do not count: parked, retrying or
	// dead, none of them can arrive.
	o.outstanding = r.PairsLost - deadLost + r.InboundLost + r.InboundUnacked + s.busy
	return o
}
