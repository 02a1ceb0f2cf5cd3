package delivery

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/courier-ap/courier/outbox"
)

// Delivery states of one inbox, as Status reports them.
const (
	StateDelivered = "delivered"
	StatePending   = "pending"   // waiting for its next attempt (or never tried yet)
	StateSending   = "sending"   // claimed by a worker now
	StateParked    = "parked"    // its host is unavailable or paused
	StateFailed    = "failed"    // given up: dead-lettered (replayable) with LastError
	StateDiscarded = "discarded" // removed from the outbox (drained) without delivery
	// StateSuperseded: not sent, for good: a Create or Update whose object
	// was deleted before it went (order.go).
	StateSuperseded = "superseded"
)

// InboxStatus is the delivery state of one activity to one inbox.
type InboxStatus struct {
	// EventID is the delivery event's id; the outbox row's id is RowID
	// (0 when the row is gone), which the admin API retries by.
	EventID string
	RowID   int64
	Inbox   string
	Host    string
	State   string
	// Attempts is the number of attempts the outbox spent.
	Attempts int
	// LastStatus, LastOutcome, LastError and LastAttemptAt describe the
	// latest recorded attempt (zero when none).
	LastStatus    int
	LastOutcome   string
	LastError     string
	LastAttemptAt time.Time
	// NextAttemptAt is when a pending delivery runs next.
	NextAttemptAt time.Time
	// ParkedAt is when the delivery was parked (zero when it is not).
	ParkedAt time.Time
	// QueueStatus is the status of the outbox row ("" when the row is
	// gone).
	QueueStatus string
}

// StatusQuery pages Status.
type StatusQuery struct {
	// After pages: only inboxes sorted after it.
	After string
	// Limit bounds the result (default 100, at most 1000).
	Limit int
}

// Status returns the delivery state of the activity activityID inbox by
// inbox, sorted by inbox: delivered, pending, sending, parked, failed (and
// why) or discarded.
func (s *Service) Status(ctx context.Context, activityID string, q StatusQuery) ([]InboxStatus, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	rows, err := s.db.Read.QueryContext(ctx, `SELECT t.event_id, t.inbox, t.host, t.parked_at,
			COALESCE(a.status_code, 0), COALESCE(a.outcome, ''), COALESCE(a.error, ''), a.attempted_at,
			h.paused_at, COALESCE(h.state, 'healthy'), COALESCE(t.state, '')
		FROM delivery_targets t
		LEFT JOIN delivery_attempts a ON a.id = (SELECT MAX(id) FROM delivery_attempts WHERE event_id = t.event_id)
		LEFT JOIN delivery_hosts h ON h.host = t.host
		WHERE t.activity_id = ? AND t.inbox > ?
		ORDER BY t.inbox LIMIT ?`, activityID, q.After, limit)
	if err != nil {
		return nil, fmt.Errorf("delivery: status of %s: %w", activityID, err)
	}
	type hostInfo struct {
		paused bool
		state  string
		target string // delivery_targets.state
	}
	var out []InboxStatus
	var hosts []hostInfo
	for rows.Next() {
		var st InboxStatus
		var parked, attempted, paused sql.NullInt64
		var hi hostInfo
		if err := rows.Scan(&st.EventID, &st.Inbox, &st.Host, &parked, &st.LastStatus, &st.LastOutcome,
			&st.LastError, &attempted, &paused, &hi.state, &hi.target); err != nil {
			rows.Close()
			return nil, fmt.Errorf("delivery: status of %s: %w", activityID, err)
		}
		st.ParkedAt, st.LastAttemptAt = fromNull(parked), fromNull(attempted)
		hi.paused = paused.Valid
		out = append(out, st)
		hosts = append(hosts, hi)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("delivery: status of %s: %w", activityID, err)
	}
	for i := range out {
		st := &out[i]
		qrows, err := s.queue.List(ctx, outbox.Filter{EventID: st.EventID, Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("delivery: status of %s: %w", activityID, err)
		}
		if len(qrows) == 0 {
			st.State = StateDiscarded
			switch {
			case hosts[i].target == targetSuperseded:
				st.State = StateSuperseded // the done row was swept
			case st.LastOutcome == OutcomeDelivered:
				st.State = StateDelivered // the done row was swept
			}
			continue
		}
		r := qrows[0]
		st.RowID, st.Attempts, st.QueueStatus = r.ID, r.Attempts, r.Status
		if r.LastError != "" && st.LastError == "" {
			st.LastError = r.LastError
		}
		switch r.Status {
		case outbox.StatusDone:
			st.State = StateDelivered
			if hosts[i].target == targetSuperseded {
				st.State = StateSuperseded
			}
		case outbox.StatusDeadLettered:
			st.State, st.LastError = StateFailed, r.LastError
		case outbox.StatusProcessing:
			st.State = StateSending
		default:
			st.NextAttemptAt = r.NextAttemptAt
			st.State = StatePending
			if !st.ParkedAt.IsZero() || hosts[i].paused || hosts[i].state == HostUnavailable {
				st.State = StateParked
			}
		}
	}
	return out, nil
}
