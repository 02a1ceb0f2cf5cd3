package delivery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/courier-ap/courier/outbox"
)

// Host health states.
const (
	HostHealthy     = "healthy"
	HostFailing     = "failing"
	HostUnavailable = "unavailable"
	// HostPaused is reported by CountHosts for hosts an operator paused,
	// whatever their health.
	HostPaused = "paused"
)

// HostStatus is the health of one remote host, as the admin API shows it.
type HostStatus struct {
	Host                string
	State               string // HostHealthy, HostFailing or HostUnavailable
	ConsecutiveFailures int
	FirstFailureAt      time.Time
	LastFailureAt       time.Time
	LastSuccessAt       time.Time
	LastError           string
	UnavailableSince    time.Time
	NextProbeAt         time.Time
	ProbeInterval       time.Duration
	// ProbeEventID is the delivery that holds the host's one try (failing)
	// or its probe (unavailable), in whichever process it runs.
	ProbeEventID string
	Paused       bool
	PausedAt     time.Time
	PauseReason  string
	UpdatedAt    time.Time
}

// hostState is a host's row of delivery_hosts as this process last read
// or wrote it.
type hostState struct {
	HostStatus
	// probeDeadline is how long the designated probe delivery
	// (ProbeEventID) keeps its designation without reporting back.
	probeDeadline time.Time
	persisted     time.Time // clock time of the last write of a success
	// epoch is the count of bad news (delivery_health_epoch) this process
	// had read before it read or wrote the row; -1 when it had none.
	epoch int64
}

// down reports whether the host is failing or unavailable.
func (e *hostState) down() bool { return e.State != HostHealthy || e.ConsecutiveFailures > 0 }

// Health keeps the health of the remote hosts deliveries go to, in
// delivery_hosts, shared by every process on the database; it also offers
// the operator's per-host actions. It is safe for concurrent use.
//
// The row is the truth, read again before a delivery is sent (one
// primary-key read on the read pool) unless this process found the host
// healthy and no host has had bad news since: every change of a row from
// healthy to failing, unavailable or paused, by any process, counts one in
// delivery_health_epoch in its own transaction (a trigger of migration
// 0019), and this process reads that count at most once per healthFresh
// (1 s). A healthy copy stands while the count is the one read before the
// copy's row was, so a host one process found dead is failing for every
// process's deliveries admitted from healthFresh later, a pause or an
// operator's reset holds as soon (at once in the process that made it),
// and deliveries to hosts that stay healthy read no row at all. A failing,
// unavailable or paused copy is read again by every delivery. Every change of health (a
// failure, a recovery, the designation of the probe of an unavailable
// host) is a transaction that locks the row (FOR UPDATE on PostgreSQL;
// SQLite's one writer is alone) and writes it back, so changes made by two
// processes at once are never lost, one recovery releases the parked
// deliveries, and one delivery at a time, in any process, holds the probe.
// The copy in memory serves what may lag: the concurrency a delivery gets
// (slotPolicy, from the row its own admission read), whether its success
// must recover the host (a success of a host this process saw healthy
// when the delivery was admitted does not look again), and the last state
// when a read fails.
type Health struct {
	s     *Service
	mu    sync.Mutex
	hosts map[string]*hostState
	// rerelease holds hosts that recovered, for a second release a moment
	// later: a delivery parking while the first release ran is settled
	// after it, and would otherwise sleep until its park recheck.
	rerelease map[string]time.Time

	readHost  *readStmt // sqlReadHost
	readEpoch *readStmt // sqlReadEpoch

	// The count of bad news as last read, and when (on mono's clock; zero
	// before the first read). epochMu is held across a read, so that the
	// deliveries of a moment share it.
	epochMu sync.Mutex
	epoch   int64
	epochAt time.Time

	mono func() time.Time // the monotonic clock of epochAt: time.Now
}

// healthFresh is how long the count of bad news (delivery_health_epoch),
// as this process last read it, stands for the count: deliveries admitted
// within it take the healthy copies read since it was read, or before it
// with the same count, for the rows. It bounds how late another process's
// news of a failure or an operator's pause reaches this process's
// deliveries: a second, far below the time a failing host takes to answer
// at all, so it costs at most the few POSTs admitted in it, each of which
// then fails on its own and is retried as any failure.
const healthFresh = time.Second

// maxHosts bounds the in-memory host map; when full it is cleared, which
// only costs re-reading the table.
const maxHosts = 100_000

func newHealth(s *Service) *Health {
	return &Health{s: s, hosts: map[string]*hostState{}, rerelease: map[string]time.Time{}, mono: time.Now,
		readHost: newReadStmt(s.db.Read, sqlReadHost, s.log), readEpoch: newReadStmt(s.db.Read, sqlReadEpoch, s.log)}
}

// probeGrace is how long after its probe time a designated probe delivery
// keeps the designation without reporting back; after that another
// delivery of the host may take it (the first may have been discarded).
func (h *Health) probeGrace() time.Duration { return h.s.cfg.Timeout + time.Minute }

// load returns host's row (a healthy host that never failed when there
// is none): the memory copy of a healthy, unpaused host when no host has
// had bad news since it was read (fresh), or else the row read now,
// remembered.
func (h *Health) load(ctx context.Context, host string) (hostState, error) {
	epoch := h.currentEpoch(ctx)
	if e, ok := h.fresh(host, epoch); ok {
		return e, nil
	}
	row, found, err := h.read(ctx, host)
	if err != nil {
		return hostState{}, err
	}
	if !found {
		row = hostState{HostStatus: HostStatus{Host: host, State: HostHealthy}}
	}
	row.epoch = epoch
	return h.remember(row), nil
}

// remember makes st the memory copy of its host and returns it as kept.
// st.epoch is the count of bad news read before st's row was read or
// written.
func (h *Health) remember(st hostState) hostState {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.hosts[st.Host]
	if cur == nil {
		if len(h.hosts) >= maxHosts {
			clear(h.hosts)
		}
		cur = &hostState{}
		h.hosts[st.Host] = cur
	}
	cur.HostStatus, cur.probeDeadline, cur.epoch = st.HostStatus, st.probeDeadline, st.epoch
	return *cur
}

// fresh returns the memory copy of host when it stands for the row: the
// host healthy and not paused, and the count of bad news epoch (as
// currentEpoch returned it) the one read before the copy's row was.
func (h *Health) fresh(host string, epoch int64) (hostState, bool) {
	if epoch < 0 {
		return hostState{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.hosts[host]
	if e == nil || e.down() || e.Paused || e.epoch != epoch {
		return hostState{}, false
	}
	return *e, true
}

const sqlReadEpoch = `SELECT COALESCE(SUM(n), 0) FROM delivery_health_epoch`

// currentEpoch returns the count of bad news as read less than healthFresh
// ago, reading it again when it is older; -1 when it cannot be read (then
// no copy stands for its row).
func (h *Health) currentEpoch(ctx context.Context) int64 {
	h.epochMu.Lock()
	defer h.epochMu.Unlock()
	if !h.epochAt.IsZero() {
		if age := h.mono().Sub(h.epochAt); age >= 0 && age < healthFresh {
			return h.epoch
		}
	}
	var n int64
	if err := h.readEpoch.QueryRowContext(ctx).Scan(&n); err != nil {
		h.epochAt = time.Time{}
		if ctx.Err() == nil {
			h.s.log.WarnContext(ctx, "delivery: read the count of hosts' bad news; reading every host's row", "err", err)
		}
		return -1
	}
	h.epoch, h.epochAt = n, h.mono()
	return n
}

// cached returns the memory copy of host, if any.
func (h *Health) cached(host string) (hostState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e := h.hosts[host]; e != nil {
		return *e, true
	}
	return hostState{}, false
}

// forget drops the memory copy of host.
func (h *Health) forget(host string) {
	h.mu.Lock()
	delete(h.hosts, host)
	h.mu.Unlock()
}

const hostColumns = `host, state, consecutive_failures, first_failure_at, last_failure_at, last_success_at,
	last_error, unavailable_since, next_probe_at, probe_interval_ms, COALESCE(probe_event_id, ''),
	probe_deadline, paused_at, pause_reason, updated_at`

type rowScanner interface{ Scan(...any) error }

func scanHost(r rowScanner) (hostState, error) {
	var (
		st                                                        hostState
		first, lastFail, lastOK, unavail, probe, deadline, paused sql.NullInt64
		intervalMs, updated                                       int64
	)
	if err := r.Scan(&st.Host, &st.State, &st.ConsecutiveFailures, &first, &lastFail, &lastOK, &st.LastError,
		&unavail, &probe, &intervalMs, &st.ProbeEventID, &deadline, &paused, &st.PauseReason, &updated); err != nil {
		return hostState{}, err
	}
	st.FirstFailureAt, st.LastFailureAt, st.LastSuccessAt = fromNull(first), fromNull(lastFail), fromNull(lastOK)
	st.UnavailableSince, st.NextProbeAt, st.PausedAt = fromNull(unavail), fromNull(probe), fromNull(paused)
	st.probeDeadline = fromNull(deadline)
	st.Paused = paused.Valid
	st.ProbeInterval = time.Duration(intervalMs) * time.Millisecond
	st.UpdatedAt = time.UnixMilli(updated)
	return st, nil
}

func fromNull(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64)
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

const sqlReadHost = `SELECT ` + hostColumns + ` FROM delivery_hosts WHERE host = ?`

// read returns host's row, read on the read pool; false when there is none.
func (h *Health) read(ctx context.Context, host string) (hostState, bool, error) {
	row := h.readHost.QueryRowContext(ctx, host)
	st, err := scanHost(row)
	if errors.Is(err, sql.ErrNoRows) {
		return hostState{}, false, nil
	}
	if err != nil {
		return hostState{}, false, fmt.Errorf("delivery: read host %s: %w", host, err)
	}
	return st, true, nil
}

// Statements of a change of a host's health (transition): the row is made
// if missing, read and locked, and written back. The lock is the one
// statement whose dialects differ: PostgreSQL runs transactions side by
// side and locks the row it reads; SQLite's transactions hold the file's
// write lock from their first statement, so the plain read is alone.
const (
	sqlEnsureHost       = `INSERT INTO delivery_hosts (host, updated_at) VALUES (?, ?) ON CONFLICT (host) DO NOTHING`
	sqlLockHostSQLite   = sqlReadHost
	sqlLockHostPostgres = sqlReadHost + ` FOR UPDATE`
	// sqlWriteHealth writes a host's health, never its pause, which only
	// the operator's actions write.
	sqlWriteHealth = `UPDATE delivery_hosts SET state = ?, consecutive_failures = ?, first_failure_at = ?,
		last_failure_at = ?, last_success_at = ?, last_error = ?, unavailable_since = ?, next_probe_at = ?,
		probe_interval_ms = ?, probe_event_id = ?, probe_deadline = ?, updated_at = ?
		WHERE host = ?`
	// sqlHostSuccess records a healthy host's success (written at most
	// once a minute, in the recorder's batches): it touches nothing else,
	// so it never undoes another process's news of a failure.
	sqlHostSuccess = `INSERT INTO delivery_hosts (host, last_success_at, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (host) DO UPDATE SET last_success_at = excluded.last_success_at`
)

func writeHealthArgs(e *hostState) []any {
	var probe any
	if e.ProbeEventID != "" {
		probe = e.ProbeEventID
	}
	return []any{e.State, e.ConsecutiveFailures, nullTime(e.FirstFailureAt), nullTime(e.LastFailureAt),
		nullTime(e.LastSuccessAt), e.LastError, nullTime(e.UnavailableSince), nullTime(e.NextProbeAt),
		e.ProbeInterval.Milliseconds(), probe, nullTime(e.probeDeadline), e.UpdatedAt.UnixMilli(), e.Host}
}

// transition changes host's health in one transaction: change gets the
// row as it is now, locked, and reports whether it changed it; a changed
// row is written back. It returns the row as it is after the transaction
// and whether change changed it. Writes of the recorder queued before are
// not waited for: they never touch a host's health.
func (h *Health) transition(ctx context.Context, host string, change func(e *hostState) bool) (hostState, bool, error) {
	lock := sqlLockHostSQLite
	if h.s.db.Postgres() {
		lock = sqlLockHostPostgres
	}
	var (
		out     hostState
		changed bool
	)
	epoch := h.currentEpoch(ctx)
	err := h.s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlEnsureHost, host, h.s.now().UnixMilli()); err != nil {
			return err
		}
		e, err := scanHost(tx.QueryRowContext(ctx, lock, host))
		if err != nil {
			return err
		}
		if changed = change(&e); changed {
			if _, err := tx.ExecContext(ctx, sqlWriteHealth, writeHealthArgs(&e)...); err != nil {
				return err
			}
		}
		out = e
		return nil
	})
	if err != nil {
		return hostState{}, false, fmt.Errorf("delivery: host %s: %w", host, err)
	}
	out.epoch = epoch
	return h.remember(out), changed, nil
}

// admission is what the health gate decided for one delivery.
type admission struct {
	probe bool // the delivery is the probe of an unavailable host
}

// admit decides whether a delivery to host may be sent now, from the
// host's row read now. It returns an outbox.Defer error to park it (paused
// or unavailable host, not the probe's turn) and an outbox.Permanent error
// when it was parked longer than ParkMax. Of an unavailable host's
// deliveries, in every process, the one that claims the probe in the row
// is sent when the probe is due; the others stay parked.
func (h *Health) admit(ctx context.Context, host string, ev outbox.Event, now time.Time) (admission, error) {
	e, err := h.load(ctx, host)
	if err != nil {
		var ok bool
		if e, ok = h.cached(host); !ok {
			return admission{}, err
		}
		// The row as last read beats failing the delivery.
		h.s.log.WarnContext(ctx, "delivery: host state read failed; using the last read", "host", host, "err", err)
	}
	if e.Paused {
		h.s.cfg.Metrics.Parked(HostPaused)
		return admission{}, outbox.Defer(now.Add(h.s.cfg.ParkRecheck), "host "+host+" paused by an operator")
	}
	if e.State != HostUnavailable {
		if e.down() {
			return h.admitFailing(ctx, host, ev, e, now)
		}
		return admission{}, nil
	}
	parkedAt, err := h.s.parkedAt(ctx, ev.ID)
	if err != nil {
		return admission{}, err
	}
	if parkedAt.IsZero() {
		parkedAt = now
		if err := h.s.rec.addWait(ctx, recOp{park: &parkOp{eventID: ev.ID, at: now}}); err != nil {
			return admission{}, err
		}
	}
	if !now.Before(parkedAt.Add(h.s.cfg.ParkMax)) {
		if e.ProbeEventID == ev.ID {
			// Give up the probe, so another delivery takes it at once.
			_, _, err := h.transition(ctx, host, func(x *hostState) bool {
				if x.ProbeEventID != ev.ID {
					return false
				}
				x.ProbeEventID, x.probeDeadline, x.UpdatedAt = "", time.Time{}, now
				return true
			})
			if err != nil {
				return admission{}, err
			}
		}
		h.s.rec.add(recOp{park: &parkOp{eventID: ev.ID}})
		return admission{}, outbox.Permanent(fmt.Errorf("%w: %s unavailable since %s; delivery parked since %s, longer than %s",
			ErrHostUnavailable, host, e.UnavailableSince.UTC().Format(time.RFC3339),
			parkedAt.UTC().Format(time.RFC3339), h.s.cfg.ParkMax))
	}
	if free := func(x *hostState) bool {
		return x.ProbeEventID == "" || x.ProbeEventID == ev.ID || now.After(x.probeDeadline)
	}; free(&e) {
		// Claim the probe: the row decides between the deliveries of
		// every process that found it free.
		grace := h.probeGrace()
		e, _, err = h.transition(ctx, host, func(x *hostState) bool {
			if x.State != HostUnavailable || !free(x) {
				return false
			}
			if x.ProbeEventID == ev.ID && now.Before(x.NextProbeAt) {
				return false // ours already, not due yet
			}
			x.ProbeEventID, x.UpdatedAt = ev.ID, now
			x.probeDeadline = maxTime(x.NextProbeAt, now).Add(grace)
			return true
		})
		if err != nil {
			return admission{}, err
		}
		if e.State != HostUnavailable { // recovered meanwhile
			return admission{}, nil
		}
		if e.ProbeEventID == ev.ID {
			if !now.Before(e.NextProbeAt) {
				return admission{probe: true}, nil
			}
			h.s.cfg.Metrics.Parked(HostUnavailable)
			return admission{}, outbox.Defer(e.NextProbeAt, "host "+host+" unavailable; next probe")
		}
	}
	h.s.cfg.Metrics.Parked(HostUnavailable)
	until := minTime(now.Add(h.s.cfg.ParkRecheck), parkedAt.Add(h.s.cfg.ParkMax))
	return admission{}, outbox.Defer(until, "host "+host+" unavailable; parked")
}

// admitFailing admits a delivery to a failing host e (not yet
// unavailable): one delivery at a time, across processes, tries it; it
// claims the try in the host's row (ProbeEventID, until probeDeadline),
// and the others are deferred on the host's backoff without spending an
// attempt. The try's outcome ends the claim (observe).
func (h *Health) admitFailing(ctx context.Context, host string, ev outbox.Event, e hostState, now time.Time) (admission, error) {
	held := func(x *hostState) bool {
		return x.ProbeEventID != "" && x.ProbeEventID != ev.ID && !now.After(x.probeDeadline)
	}
	wait := func(x *hostState) error {
		h.s.cfg.Metrics.Parked(HostFailing)
		return outbox.Defer(now.Add(outbox.Backoff(x.ConsecutiveFailures)), "host "+host+" failing: another delivery is trying it")
	}
	if held(&e) {
		return admission{}, wait(&e)
	}
	deadline := now.Add(h.s.cfg.Timeout + flightGrace)
	st, _, err := h.transition(ctx, host, func(x *hostState) bool {
		if !x.down() || x.State == HostUnavailable || held(x) {
			return false
		}
		x.ProbeEventID, x.probeDeadline, x.UpdatedAt = ev.ID, deadline, now
		return true
	})
	switch {
	case err != nil:
		return admission{}, err
	case st.State == HostUnavailable:
		return h.admit(ctx, host, ev, now) // made unavailable meanwhile
	case !st.down() || st.ProbeEventID == ev.ID:
		return admission{}, nil
	}
	return admission{}, wait(&st)
}

// endTry ends the claim of eventID on a failing host's try, if it holds
// it, after a delivery that sent nothing.
func (h *Health) endTry(ctx context.Context, host, eventID string, now time.Time) {
	e, ok := h.cached(host)
	if !ok || e.ProbeEventID != eventID || e.State == HostUnavailable {
		return
	}
	_, _, err := h.transition(ctx, host, func(x *hostState) bool {
		if x.ProbeEventID != eventID || x.State == HostUnavailable {
			return false
		}
		x.ProbeEventID, x.probeDeadline, x.UpdatedAt = "", time.Time{}, now
		return true
	})
	if err != nil {
		h.s.log.WarnContext(ctx, "delivery: host state not written", "host", host, "err", err)
	}
}

// slotPolicy returns how many concurrent POSTs host may have, how long a
// delivery may wait for a free slot, and the least delay of a delivery that
// found none. A healthy host that answered before gets this process's
// share of PerHostConcurrency (see Announce) and SlotWait. A failing host gets one slot, no waiting and its backoff;
// a host that never answered yet gets one slot and no waiting (a slow
// start: a host that accepts connections and never answers then holds one
// worker, not PerHostConcurrency).
func (h *Health) slotPolicy(host string) (limit int, wait, backoff time.Duration) {
	e, ok := h.cached(host)
	switch {
	case !ok:
		return 1, 0, 0
	case e.State != HostHealthy || e.ConsecutiveFailures > 0:
		return 1, 0, outbox.Backoff(e.ConsecutiveFailures)
	case e.LastSuccessAt.IsZero():
		return 1, 0, 0
	}
	return h.s.hostLimit(), h.s.cfg.SlotWait, 0
}

// observe updates host's health after a POST classified as d: a failure
// is written to the host's row before observe returns, so every process's
// next delivery to the host knows it. It returns the time a failed probe's
// delivery must wait for (zero otherwise).
func (h *Health) observe(ctx context.Context, host, eventID string, d Decision, probe bool, now time.Time) time.Time {
	if d.Verdict == Refused {
		h.endTry(ctx, host, eventID, now)
		return time.Time{} // nothing was sent: no news of the host
	}
	if !d.HostDown {
		e, ok := h.cached(host)
		if !ok {
			var err error
			if e, err = h.load(ctx, host); err != nil {
				h.s.log.WarnContext(ctx, "delivery: host state unavailable", "host", host, "err", err)
				return time.Time{}
			}
		}
		h.alive(ctx, e, now)
		return time.Time{}
	}
	var (
		wait                 time.Time
		probeFailed, unavail bool
	)
	e, _, err := h.transition(ctx, host, func(e *hostState) bool {
		wait, probeFailed, unavail = time.Time{}, false, false
		e.ConsecutiveFailures++
		e.LastFailureAt, e.LastError, e.UpdatedAt = now, d.Reason, now
		if e.FirstFailureAt.IsZero() {
			e.FirstFailureAt = now
		}
		switch e.State {
		case HostHealthy, HostFailing:
			e.State = HostFailing
			if e.ProbeEventID == eventID { // this try is over
				e.ProbeEventID, e.probeDeadline = "", time.Time{}
			}
		case HostUnavailable:
			if probe {
				e.ProbeInterval = min(max(e.ProbeInterval*2, h.s.cfg.ProbeInterval), h.s.cfg.ProbeMaxInterval)
				e.NextProbeAt = now.Add(e.ProbeInterval)
				e.ProbeEventID = eventID
				e.probeDeadline = e.NextProbeAt.Add(h.probeGrace())
				wait, probeFailed = e.NextProbeAt, true
			}
		}
		if e.State == HostFailing && now.Sub(e.FirstFailureAt) >= h.s.cfg.UnavailableAfter {
			e.State, e.UnavailableSince = HostUnavailable, now
			e.ProbeInterval = h.s.cfg.ProbeInterval
			e.NextProbeAt = now.Add(e.ProbeInterval)
			e.ProbeEventID, e.probeDeadline = "", time.Time{}
			unavail = true
		}
		return true
	})
	if err != nil {
		h.s.log.WarnContext(ctx, "delivery: host state not written", "host", host, "err", err)
		return time.Time{}
	}
	if probeFailed {
		h.s.log.InfoContext(ctx, "delivery: probe of unavailable host failed", "host", host,
			"event_id", eventID, "delay", e.ProbeInterval, "err", d.Reason)
	}
	if unavail {
		h.s.log.WarnContext(ctx, "delivery: host unavailable; parking its deliveries", "host", host,
			"failing_since", e.FirstFailureAt.UTC(), "failures", e.ConsecutiveFailures, "err", d.Reason)
	}
	return wait
}

// alive records a sign of life of e's host (e is the row as this process
// last saw it). When the host was failing or unavailable, the row is made
// healthy, and the process whose transaction did so releases the host's
// deliveries waiting on backoff or parked, those of every process.
func (h *Health) alive(ctx context.Context, e hostState, now time.Time) {
	host := e.Host
	if !e.down() {
		// A success of a healthy host is written at most once a minute.
		h.mu.Lock()
		cur := h.hosts[host]
		write := cur != nil && (now.Sub(cur.persisted) >= time.Minute || now.Before(cur.persisted))
		if write {
			cur.persisted, cur.LastSuccessAt = now, now
		}
		h.mu.Unlock()
		if write {
			h.s.rec.add(recOp{hostSuccess: []any{host, now.UnixMilli(), now.UnixMilli()}})
		}
		return
	}
	var prev string
	_, changed, err := h.transition(ctx, host, func(x *hostState) bool {
		if !x.down() {
			return false // recovered by another delivery meanwhile
		}
		prev = x.State
		x.State, x.ConsecutiveFailures, x.LastError = HostHealthy, 0, ""
		x.FirstFailureAt, x.UnavailableSince, x.NextProbeAt, x.ProbeInterval = time.Time{}, time.Time{}, time.Time{}, 0
		x.ProbeEventID, x.probeDeadline = "", time.Time{}
		x.LastSuccessAt, x.UpdatedAt = now, now
		return true
	})
	if err != nil {
		h.s.log.WarnContext(ctx, "delivery: host recovery not written", "host", host, "err", err)
		return
	}
	if !changed {
		return
	}
	h.mu.Lock()
	if cur := h.hosts[host]; cur != nil {
		cur.persisted = now
	}
	if len(h.rerelease) < maxHosts {
		h.rerelease[host] = time.Now().Add(rereleaseAfter)
	}
	h.mu.Unlock()
	h.s.rec.add(recOp{unpark: host})
	n, err := h.s.queue.ReleaseTarget(ctx, host)
	if err != nil {
		h.s.log.WarnContext(ctx, "delivery: release deliveries of recovered host", "host", host, "err", err)
		return
	}
	h.s.log.InfoContext(ctx, "delivery: host recovered; deliveries released", "host", host,
		"previous_state", prev, "released", n)
}

// rereleaseAfter is how long after a recovery its second release runs: longer
// than a handler takes to park a delivery and the outbox to settle it.
const rereleaseAfter = 2 * time.Second

// releaseAgain runs the second release of hosts that recovered at least
// rereleaseAfter ago.
func (h *Health) releaseAgain(ctx context.Context) {
	now := time.Now()
	var due []string
	h.mu.Lock()
	for host, at := range h.rerelease {
		if !now.Before(at) {
			due = append(due, host)
			delete(h.rerelease, host)
		}
	}
	h.mu.Unlock()
	for _, host := range due {
		if _, err := h.s.queue.ReleaseTarget(ctx, host); err != nil && ctx.Err() == nil {
			h.s.log.WarnContext(ctx, "delivery: release deliveries of recovered host", "host", host, "err", err)
		}
	}
}

// SignOfLife records that host is alive (an inbound request from it
// verified): a failing or unavailable host becomes healthy and its waiting
// deliveries are released at once. host is a host name or host:port, as in
// a key id's URL. For a healthy host it costs one read of its row (the
// inbox sends a host's sign of life at most once a SignOfLifeInterval).
func (h *Health) SignOfLife(ctx context.Context, host string) {
	host = NormalizeHost(host, "")
	if host == "" {
		return
	}
	e, err := h.load(ctx, host)
	if err != nil {
		h.s.log.WarnContext(ctx, "delivery: sign of life", "host", host, "err", err)
		return
	}
	if e.down() {
		h.alive(ctx, e, h.s.now())
	}
}

// Host returns the health of host (ErrUnknownHost when courier never
// delivered to it).
func (h *Health) Host(ctx context.Context, host string) (HostStatus, error) {
	host = NormalizeHost(host, "")
	st, found, err := h.read(ctx, host)
	if err != nil {
		return HostStatus{}, err
	}
	if !found {
		return HostStatus{}, fmt.Errorf("%w: %s", ErrUnknownHost, host)
	}
	return st.HostStatus, nil
}

// HostQuery selects hosts for Hosts.
type HostQuery struct {
	// State filters by health state ("" for all; HostPaused for paused).
	State string
	// After pages: only hosts sorted after it.
	After string
	// Limit bounds the result (default 100, at most 1000).
	Limit int
}

// Hosts lists host health, sorted by host.
func (h *Health) Hosts(ctx context.Context, q HostQuery) ([]HostStatus, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	where, args := `host > ?`, []any{q.After}
	switch q.State {
	case "":
	case HostPaused:
		where += ` AND paused_at IS NOT NULL`
	default:
		where += ` AND state = ?`
		args = append(args, q.State)
	}
	rows, err := h.s.db.Read.QueryContext(ctx, `SELECT `+hostColumns+` FROM delivery_hosts WHERE `+where+
		` ORDER BY host LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("delivery: hosts: %w", err)
	}
	defer rows.Close()
	var out []HostStatus
	for rows.Next() {
		st, err := scanHost(rows)
		if err != nil {
			return nil, fmt.Errorf("delivery: hosts: %w", err)
		}
		out = append(out, st.HostStatus)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("delivery: hosts: %w", err)
	}
	return out, nil
}

// Pause stops deliveries to host until Resume: they are deferred without
// spending attempts (and never dead-lettered while paused).
func (h *Health) Pause(ctx context.Context, host, reason string) error {
	host = NormalizeHost(host, "")
	if host == "" {
		return fmt.Errorf("%w: empty host", ErrUnknownHost)
	}
	now := h.s.now()
	err := h.s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO delivery_hosts (host, paused_at, pause_reason, updated_at)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (host) DO UPDATE SET paused_at = excluded.paused_at, pause_reason = excluded.pause_reason`,
			host, now.UnixMilli(), reason, now.UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("delivery: pause %s: %w", host, err)
	}
	h.forget(host)
	h.s.log.InfoContext(ctx, "delivery: host paused", "host", host, "reason", reason)
	return nil
}

// Resume lifts an operator's pause of host and makes its pending
// deliveries due now. It returns how many were released.
func (h *Health) Resume(ctx context.Context, host string) (int64, error) {
	host = NormalizeHost(host, "")
	if err := h.change(ctx, "resume", host, `UPDATE delivery_hosts SET paused_at = NULL, pause_reason = '' WHERE host = ?`); err != nil {
		return 0, err
	}
	n, err := h.release(ctx, "resume", host)
	if err != nil {
		return 0, err
	}
	h.s.log.InfoContext(ctx, "delivery: host resumed", "host", host, "released", n)
	return n, nil
}

// RetryNow makes host's pending deliveries due now. For an unavailable
// host, its next probe is due now too: one delivery probes and the others
// park again until it succeeds. It returns how many deliveries were
// released.
func (h *Health) RetryNow(ctx context.Context, host string) (int64, error) {
	host = NormalizeHost(host, "")
	now := h.s.now().UnixMilli()
	if err := h.change(ctx, "retry", host, `UPDATE delivery_hosts SET
		next_probe_at = CASE WHEN state = 'unavailable' THEN ? ELSE next_probe_at END,
		probe_event_id = NULL, probe_deadline = NULL, updated_at = ? WHERE host = ?`, now, now, host); err != nil {
		return 0, err
	}
	return h.release(ctx, "retry", host)
}

// Reset forgets host's health (it is healthy again, failures cleared; a
// pause stays) and makes its pending deliveries due now. It returns how
// many were released.
func (h *Health) Reset(ctx context.Context, host string) (int64, error) {
	host = NormalizeHost(host, "")
	now := h.s.now().UnixMilli()
	err := h.change(ctx, "reset", host, `UPDATE delivery_hosts SET state = 'healthy', consecutive_failures = 0,
		first_failure_at = NULL, last_failure_at = NULL, last_error = '', unavailable_since = NULL,
		next_probe_at = NULL, probe_interval_ms = 0, probe_event_id = NULL, probe_deadline = NULL,
		updated_at = ? WHERE host = ?`, now, host)
	if err != nil {
		return 0, err
	}
	h.s.rec.add(recOp{unpark: host})
	n, err := h.release(ctx, "reset", host)
	if err != nil {
		return 0, err
	}
	h.s.log.InfoContext(ctx, "delivery: host reset", "host", host, "released", n)
	return n, nil
}

// drainPage bounds each listing of Drain.
const drainPage = 500

// Drain discards host's pending deliveries (never one being sent) and
// returns how many it discarded. Their attempt records stay.
func (h *Health) Drain(ctx context.Context, host string) (int, error) {
	host = NormalizeHost(host, "")
	if host == "" {
		return 0, fmt.Errorf("%w: empty host", ErrUnknownHost)
	}
	n := 0
	var after int64
	for {
		rows, err := h.s.queue.List(ctx, outbox.Filter{Status: outbox.StatusPending, Type: h.s.EventType(host),
			Target: host, AfterID: after, Limit: drainPage})
		if err != nil {
			return n, fmt.Errorf("delivery: drain %s: %w", host, err)
		}
		for _, r := range rows {
			after = r.ID
			err := h.s.queue.Discard(ctx, r.ID)
			switch {
			case err == nil:
				n++
			case errors.Is(err, outbox.ErrState), errors.Is(err, outbox.ErrNotFound):
				// claimed or gone meanwhile
			default:
				return n, fmt.Errorf("delivery: drain %s: %w", host, err)
			}
		}
		if len(rows) < drainPage {
			break
		}
	}
	h.s.rec.add(recOp{unpark: host})
	h.s.log.InfoContext(ctx, "delivery: host drained", "host", host, "discarded", n)
	return n, nil
}

// Forget removes host's row, its health and history, for a host that is
// gone for good (a channel's removed target): it leaves the hosts'
// listing. Its deliveries are not touched (Drain them first). An unknown
// host is ErrUnknownHost.
func (h *Health) Forget(ctx context.Context, host string) error {
	host = NormalizeHost(host, "")
	if err := h.change(ctx, "forget", host, `DELETE FROM delivery_hosts WHERE host = ?`); err != nil {
		return err
	}
	h.forget(host)
	return nil
}

// change runs one UPDATE of host's row; no row is ErrUnknownHost. Host
// state queued for writing is written first, so the change is not
// overwritten by an older state.
func (h *Health) change(ctx context.Context, op, host, query string, args ...any) error {
	if len(args) == 0 {
		args = []any{host}
	}
	if err := h.s.rec.addWait(ctx, recOp{}); err != nil {
		return fmt.Errorf("delivery: %s %s: %w", op, host, err)
	}
	err := h.s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: %s", ErrUnknownHost, host)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delivery: %s %s: %w", op, host, err)
	}
	return nil
}

// release ends an operator's change of host's row: it drops the memory
// copy and makes host's pending deliveries due now. It returns how many were
// released.
func (h *Health) release(ctx context.Context, op, host string) (int64, error) {
	h.forget(host)
	n, err := h.s.queue.ReleaseTarget(ctx, host)
	if err != nil {
		return 0, fmt.Errorf("delivery: %s %s: %w", op, host, err)
	}
	return n, nil
}

// CountHosts implements metrics.HostStats: hosts per health state, paused
// hosts counted as HostPaused.
func (h *Health) CountHosts(ctx context.Context, fn func(state string, hosts int64)) error {
	rows, err := h.s.db.Read.QueryContext(ctx, `SELECT CASE WHEN paused_at IS NOT NULL THEN 'paused' ELSE state END,
		COUNT(*) FROM delivery_hosts GROUP BY 1`)
	if err != nil {
		return fmt.Errorf("delivery: count hosts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return fmt.Errorf("delivery: count hosts: %w", err)
		}
		fn(st, n)
	}
	return rows.Err()
}

// CountParked implements metrics.HostStats: deliveries parked now because
// their host is unavailable.
func (h *Health) CountParked(ctx context.Context) (int64, error) {
	var n int64
	if err := h.s.db.Read.QueryRowContext(ctx, `SELECT COUNT(*) FROM delivery_targets WHERE parked_at IS NOT NULL`).Scan(&n); err != nil {
		return 0, fmt.Errorf("delivery: count parked: %w", err)
	}
	return n, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
