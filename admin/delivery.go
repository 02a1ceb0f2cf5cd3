package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/courier-ap/courier/delivery"
	"github.com/courier-ap/courier/outbox"
)

// DeliveryState implements Hosts and Deliveries over the delivery service:
// its host health and controls, its per-inbox status, and counts of each
// host's deliveries in the outbox.
type DeliveryState struct {
	svc   *delivery.Service
	queue *outbox.Queue
}

// NewDeliveryState returns the Hosts and Deliveries of svc; queue is the
// outbox the counts are read from (the same database).
func NewDeliveryState(svc *delivery.Service, queue *outbox.Queue) *DeliveryState {
	return &DeliveryState{svc: svc, queue: queue}
}

var (
	_ Hosts      = (*DeliveryState)(nil)
	_ Deliveries = (*DeliveryState)(nil)
)

// Counting bounds: a host's deliveries are counted by paging through its
// outbox rows, at most this many per status (the count then reads "at
// least"). The host list counts less per host than one host's view.
const (
	countCapOne  = 100_000
	countCapList = 10_000
)

// notFound makes delivery's unknown host an ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, delivery.ErrUnknownHost) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (d *DeliveryState) host(ctx context.Context, st delivery.HostStatus, countCap int) (Host, error) {
	h := Host{
		Host: st.Host, State: st.State, Paused: st.Paused, PausedAt: utc(st.PausedAt), PauseReason: st.PauseReason,
		ConsecutiveFailures: st.ConsecutiveFailures, FirstFailureAt: utc(st.FirstFailureAt),
		LastFailureAt: utc(st.LastFailureAt), LastSuccessAt: utc(st.LastSuccessAt),
		UnavailableSince: utc(st.UnavailableSince), NextProbeAt: utc(st.NextProbeAt), LastError: st.LastError,
	}
	var capped bool
	var err error
	if h.Pending, capped, err = d.count(ctx, st.Host, outbox.StatusPending, countCap); err != nil {
		return Host{}, err
	}
	h.CountsCapped = capped
	if h.DeadLettered, capped, err = d.count(ctx, st.Host, outbox.StatusDeadLettered, countCap); err != nil {
		return Host{}, err
	}
	h.CountsCapped = h.CountsCapped || capped
	// Every waiting delivery of a paused or unavailable host is held
	// back (parked) rather than attempted.
	if st.Paused || st.State == delivery.HostUnavailable {
		h.Parked = h.Pending
	}
	return h, nil
}

// count counts the host's delivery rows with status, up to countCap; it
// reports whether it stopped there.
func (d *DeliveryState) count(ctx context.Context, host, status string, countCap int) (int64, bool, error) {
	n, err := d.queue.Count(ctx, outbox.Filter{Status: status, Type: d.svc.EventType(host), Target: host}, int64(countCap))
	if err != nil {
		return 0, false, err
	}
	return n, n >= int64(countCap), nil
}

// ListHosts implements Hosts.
func (d *DeliveryState) ListHosts(ctx context.Context, after string, limit int) ([]Host, error) {
	sts, err := d.svc.Health().Hosts(ctx, delivery.HostQuery{After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]Host, 0, len(sts))
	for _, st := range sts {
		h, err := d.host(ctx, st, countCapList)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// Host implements Hosts.
func (d *DeliveryState) Host(ctx context.Context, host string) (Host, error) {
	st, err := d.svc.Health().Host(ctx, host)
	if err != nil {
		return Host{}, notFound(err)
	}
	return d.host(ctx, st, countCapOne)
}

// Pause implements Hosts.
func (d *DeliveryState) Pause(ctx context.Context, host, reason string) error {
	return notFound(d.svc.Health().Pause(ctx, host, reason))
}

// Resume implements Hosts.
func (d *DeliveryState) Resume(ctx context.Context, host string) (int64, error) {
	n, err := d.svc.Health().Resume(ctx, host)
	return n, notFound(err)
}

// RetryNow implements Hosts.
func (d *DeliveryState) RetryNow(ctx context.Context, host string) (int64, error) {
	n, err := d.svc.Health().RetryNow(ctx, host)
	return n, notFound(err)
}

// Drain implements Hosts.
func (d *DeliveryState) Drain(ctx context.Context, host string) (int64, error) {
	n, err := d.svc.Health().Drain(ctx, host)
	return int64(n), notFound(err)
}

// Forget removes a host's row (hostForgetter).
func (d *DeliveryState) Forget(ctx context.Context, host string) error {
	return notFound(d.svc.Health().Forget(ctx, host))
}

// Reset implements Hosts.
func (d *DeliveryState) Reset(ctx context.Context, host string) (int64, error) {
	n, err := d.svc.Health().Reset(ctx, host)
	return n, notFound(err)
}

// supersededDeliveries is a Deliveries that tells the deliveries settled
// as superseded (DeliveryState).
type supersededDeliveries interface {
	Superseded(ctx context.Context, eventID string) (bool, error)
}

// superseded reports whether row is a delivery settled as superseded.
func (a *API) superseded(ctx context.Context, row outbox.Row) (bool, error) {
	sd, ok := a.cfg.Deliveries.(supersededDeliveries)
	if !ok || row.Status != outbox.StatusDone || row.Event.Type != delivery.EventPost || row.Event.ID == "" {
		return false, nil
	}
	return sd.Superseded(ctx, row.Event.ID)
}

// Superseded reports whether delivery eventID was settled as superseded.
func (d *DeliveryState) Superseded(ctx context.Context, eventID string) (bool, error) {
	return d.svc.Superseded(ctx, eventID)
}

// ActivityDeliveries implements Deliveries.
func (d *DeliveryState) ActivityDeliveries(ctx context.Context, activityID, after string, limit int) ([]InboxStatus, error) {
	sts, err := d.svc.Status(ctx, activityID, delivery.StatusQuery{After: after, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]InboxStatus, 0, len(sts))
	for _, st := range sts {
		out = append(out, inboxStatus(st))
	}
	return out, nil
}

func inboxStatus(st delivery.InboxStatus) InboxStatus {
	state := st.State
	if state == delivery.StateSending {
		state = StateInFlight
	}
	return InboxStatus{
		Inbox: st.Inbox, Host: st.Host, EventID: st.EventID, State: state, Attempts: st.Attempts,
		LastStatus: st.LastStatus, LastOutcome: st.LastOutcome, LastError: st.LastError,
		LastAttemptAt: utc(st.LastAttemptAt), NextAttemptAt: utc(st.NextAttemptAt), ParkedAt: utc(st.ParkedAt),
		QueueStatus: st.QueueStatus,
	}
}

// EventAttempts implements Deliveries with the latest recorded attempt of
// a delivery event (the delivery service exports its status per inbox,
// not its full attempt log).
func (d *DeliveryState) EventAttempts(ctx context.Context, ev outbox.Event) ([]DeliveryAttempt, error) {
	if ev.Type != delivery.EventPost {
		return nil, nil
	}
	var p delivery.Post
	if err := json.Unmarshal(ev.Payload, &p); err != nil || p.ActivityID == "" || p.Inbox == "" {
		return nil, nil // a payload delivery itself refuses; the event shows why
	}
	sts, err := d.svc.Status(ctx, p.ActivityID, delivery.StatusQuery{After: justBefore(p.Inbox), Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(sts) == 0 || sts[0].Inbox != p.Inbox || sts[0].LastAttemptAt.IsZero() {
		return nil, nil
	}
	st := sts[0]
	return []DeliveryAttempt{{
		EventID: st.EventID, ActivityID: p.ActivityID, Inbox: st.Inbox, Host: st.Host, At: utc(st.LastAttemptAt),
		Status: st.LastStatus, Outcome: st.LastOutcome, Error: st.LastError,
	}}, nil
}

// justBefore returns a string that sorts bytewise (as SQLite's BINARY
// collation and PostgreSQL's C collation compare) immediately before s
// among the strings a URL can be: s with its last code point decreased and
// followed by the largest, U+10FFFF, which no URL contains (UTF-8's byte
// order is its code points' order). Paging "after" it starts exactly at s.
// It stays valid UTF-8, which PostgreSQL requires of a text argument.
// Under another collation the neighbour found may be another inbox;
// EventAttempts then shows no attempt rather than another's.
func justBefore(s string) string {
	r, n := utf8.DecodeLastRuneInString(s)
	if n == 0 || r == utf8.RuneError {
		return ""
	}
	prefix := s[:len(s)-n]
	if r == 0 {
		return prefix
	}
	r--
	if r == 0xDFFF { // below the surrogates
		r = 0xD7FF
	}
	return prefix + string(r) + strings.Repeat("\U0010FFFF", 4)
}

// Processes lists the processes that deliver from the database (package
// delivery's Service.Processes).
type Processes interface {
	Processes(ctx context.Context) ([]delivery.Process, error)
}

var _ Processes = (*delivery.Service)(nil)
