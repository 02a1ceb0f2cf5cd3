package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/store"
)

// Host is the delivery health of one remote host and its delivery counts.
type Host struct {
	Host string `json:"host"`
	// State is healthy, failing (failures, not yet for long) or
	// unavailable (deliveries parked, one probe at a time).
	State string `json:"state"`
	// Paused is an operator pause: deliveries wait without spending
	// attempts until resumed.
	Paused              bool      `json:"paused"`
	PausedAt            time.Time `json:"paused_at,omitzero"`
	PauseReason         string    `json:"pause_reason,omitempty"`
	ConsecutiveFailures int       `json:"consecutive_failures"`
	FirstFailureAt      time.Time `json:"first_failure_at,omitzero"`
	LastFailureAt       time.Time `json:"last_failure_at,omitzero"`
	LastSuccessAt       time.Time `json:"last_success_at,omitzero"`
	UnavailableSince    time.Time `json:"unavailable_since,omitzero"`
	NextProbeAt         time.Time `json:"next_probe_at,omitzero"`
	LastError           string    `json:"last_error,omitempty"`
	// Pending is how many deliveries to the host wait in the outbox (due,
	// backing off or parked): what a drain discards. Parked is the part of
	// them parked while the host is unavailable or paused.
	Pending      int64 `json:"pending"`
	Parked       int64 `json:"parked"`
	DeadLettered int64 `json:"dead_lettered"`
	// CountsCapped is set when counting stopped at a bound: the counts
	// are then lower bounds.
	CountsCapped bool `json:"counts_capped,omitempty"`
}

// Hosts is what the API needs of the delivery side's host health. Host
// names are bare lower-case host names (with a port only when not the
// scheme's default), as delivery events carry them in their target. An
// unknown host is an error matching ErrNotFound.
type Hosts interface {
	// ListHosts returns up to limit hosts whose names sort after `after`,
	// in name order.
	ListHosts(ctx context.Context, after string, limit int) ([]Host, error)
	// Host returns one host.
	Host(ctx context.Context, host string) (Host, error)
	// Pause stops deliveries to host until Resume; they wait without
	// spending attempts.
	Pause(ctx context.Context, host, reason string) error
	// Resume ends a pause and makes the host's waiting deliveries due; it
	// returns how many.
	Resume(ctx context.Context, host string) (int64, error)
	// RetryNow makes the host's parked and backing-off deliveries due now
	// and returns how many.
	RetryNow(ctx context.Context, host string) (int64, error)
	// Drain discards the host's pending deliveries and returns how many.
	Drain(ctx context.Context, host string) (int64, error)
	// Reset forgets the host's failure history (back to healthy) and makes
	// its waiting deliveries due; it returns how many.
	Reset(ctx context.Context, host string) (int64, error)
}

// InboxStatus is the delivery of one activity to one inbox.
type InboxStatus struct {
	Inbox   string `json:"inbox"`
	Host    string `json:"host"`
	EventID string `json:"event_id,omitempty"`
	// State is delivered, pending, parked, in_flight, failed or discarded.
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	LastStatus  int    `json:"last_status,omitempty"`
	LastOutcome string `json:"last_outcome,omitempty"`
	// LastError says why a delivery that has not succeeded failed last.
	LastError     string    `json:"last_error,omitempty"`
	LastAttemptAt time.Time `json:"last_attempt_at,omitzero"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// ParkedAt is when the delivery was parked (zero when it is not).
	ParkedAt time.Time `json:"parked_at,omitzero"`
	// QueueStatus is the status of the delivery's outbox row ("" once the
	// row is gone after retention).
	QueueStatus string `json:"queue_status,omitempty"`
}

// DeliveryAttempt is one POST (or give-up) of a delivery.
type DeliveryAttempt struct {
	EventID    string    `json:"event_id"`
	ActivityID string    `json:"activity_id,omitempty"`
	Inbox      string    `json:"inbox"`
	Host       string    `json:"host"`
	At         time.Time `json:"at"`
	// Status is the HTTP status (0 when no response arrived).
	Status int `json:"status,omitempty"`
	// Outcome is delivered, retry, permanent, refused or dead.
	Outcome    string `json:"outcome"`
	Error      string `json:"error,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// Deliveries is what the API needs of the delivery side's record of
// attempts.
type Deliveries interface {
	// ActivityDeliveries returns up to limit inboxes of the activity with
	// id activityID (its URL) whose URLs sort after `after`, in inbox
	// order. An inbox whose State is left empty is reported as pending.
	ActivityDeliveries(ctx context.Context, activityID, after string, limit int) ([]InboxStatus, error)
	// EventAttempts returns the attempts recorded for the delivery event
	// ev, oldest first (none for events that deliver nothing).
	EventAttempts(ctx context.Context, ev outbox.Event) ([]DeliveryAttempt, error)
}

var errNoHosts = errorf(EUNAVAILABLE, "host health is not available on this server (no delivery service is configured)")

// hostParam reads and normalizes the {host} of a route: lower case, no
// scheme, path or trailing dot.
func hostParam(r *http.Request) (string, error) {
	raw := mux.Vars(r)["host"]
	h := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(raw)), ".")
	if h == "" || len(h) > 253 || strings.ContainsAny(h, " /?#@\\") {
		return "", errorf(EINVALID, "host %q: want a host name such as social.example", raw)
	}
	if u, err := url.Parse("//" + h); err != nil || u.Host != h {
		return "", errorf(EINVALID, "host %q: want a host name such as social.example", raw)
	}
	return h, nil
}

// hostError turns the implementation's not-found into a message naming the
// host.
func hostError(err error, host string) error {
	if errors.Is(err, ErrNotFound) {
		return errorf(ENOTFOUND, "courier has no delivery state for host %s", host)
	}
	return err
}

var hostListParams = map[string]bool{"cursor": true, "limit": true}

func (a *API) listHosts(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Hosts == nil {
		return errNoHosts
	}
	var out HostList
	var err error
	out.Hosts, out.NextCursor, err = hostPage(r, a.cfg.Hosts.ListHosts, func(h Host) string { return h.Host })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// withHost serves a route of one host: it answers errNoHosts without host
// health and refuses a malformed {host}, else it runs fn with the host.
func (a *API) withHost(fn func(w http.ResponseWriter, r *http.Request, host string) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if a.cfg.Hosts == nil {
			return errNoHosts
		}
		host, err := hostParam(r)
		if err != nil {
			return err
		}
		return fn(w, r, host)
	}
}

func (a *API) getHost(w http.ResponseWriter, r *http.Request, host string) error {
	h, err := a.cfg.Hosts.Host(r.Context(), host)
	if err != nil {
		return hostError(err, host)
	}
	return writeJSON(w, http.StatusOK, h)
}

func (a *API) pauseHost(w http.ResponseWriter, r *http.Request, host string) error {
	q := r.URL.Query()
	reason := q.Get("reason")
	if len(reason) > 500 {
		return errorf(EINVALID, "reason is longer than 500 bytes")
	}
	if err := a.cfg.Hosts.Pause(r.Context(), host, reason); err != nil {
		return hostError(err, host)
	}
	a.log.InfoContext(r.Context(), "admin: host paused", "host", host, "reason", reason, "count", 1)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "pause", Host: host,
		Message: "deliveries to the host wait, spending no attempts, until it is resumed"})
}

// releasingAction is a per-host operation that makes waiting deliveries due
// and says how many it released.
type releasingAction struct {
	action, logMsg, message string
	do                      func(Hosts) func(ctx context.Context, host string) (int64, error)
}

var (
	resumeAction = releasingAction{"resume", "admin: host resumed",
		"pause lifted; waiting deliveries are due now", func(h Hosts) func(context.Context, string) (int64, error) { return h.Resume }}
	retryAction = releasingAction{"retry", "admin: host deliveries released",
		"waiting deliveries are due now", func(h Hosts) func(context.Context, string) (int64, error) { return h.RetryNow }}
	resetAction = releasingAction{"reset", "admin: host reset",
		"failure history forgotten; waiting deliveries are due now", func(h Hosts) func(context.Context, string) (int64, error) { return h.Reset }}
)

// hostAction serves one releasingAction.
func (a *API) hostAction(act releasingAction) func(w http.ResponseWriter, r *http.Request, host string) error {
	return func(w http.ResponseWriter, r *http.Request, host string) error {
		n, err := act.do(a.cfg.Hosts)(r.Context(), host)
		if err != nil {
			return hostError(err, host)
		}
		a.log.InfoContext(r.Context(), act.logMsg, "host", host, "count", n)
		return writeJSON(w, http.StatusOK, ActionResult{Action: act.action, Host: host, Count: &n, Message: act.message})
	}
}

// drainHost discards a host's pending deliveries. Without confirm=<host> it
// changes nothing and answers 409 with how many would be discarded.
func (a *API) drainHost(w http.ResponseWriter, r *http.Request, host string) error {
	confirm := r.URL.Query().Get("confirm")
	if confirm == "" {
		h, err := a.cfg.Hosts.Host(r.Context(), host)
		if err != nil {
			return hostError(err, host)
		}
		return &Error{Code: ECONFIRM,
			Message: sprintf("draining %s discards %d pending deliveries; repeat with confirm=%s", host, h.Pending, host),
			Fields:  map[string]any{"host": host, "would_discard": h.Pending}}
	}
	if !strings.EqualFold(strings.TrimSuffix(confirm, "."), host) {
		return errorf(EINVALID, "confirm=%s does not name the host being drained (%s)", confirm, host)
	}
	n, err := a.cfg.Hosts.Drain(r.Context(), host)
	if err != nil {
		return hostError(err, host)
	}
	a.log.InfoContext(r.Context(), "admin: host drained", "host", host, "count", n)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "drain", Host: host, Count: &n,
		Message: "pending deliveries discarded"})
}

// Inbox delivery states.
const (
	StateDelivered = "delivered"
	StatePending   = "pending"
	StateParked    = "parked"
	StateInFlight  = "in_flight"
	StateFailed    = "failed"
	StateDiscarded = "discarded"
	// StateSuperseded: not sent, for good: a Create or Update whose
	// object was deleted before it went.
	StateSuperseded = "superseded"
)

// activityDeliveries answers the delivery status of one local activity,
// inbox by inbox.
func (a *API) activityDeliveries(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.Deliveries == nil {
		return errorf(EUNAVAILABLE, "delivery status is not available on this server (no delivery service is configured)")
	}
	ctx := r.Context()
	q := r.URL.Query()
	if err := checkParams(q, hostListParams); err != nil {
		return err
	}
	limit, err := parseLimit(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	ref := mux.Vars(r)["id"]
	if _, err := uuid.Parse(ref); err != nil {
		return errorf(EINVALID, "activity %q: want the id of a local activity (the UUID of /activities/{id})", ref)
	}
	act, err := a.cfg.Store.ActivityByLocalID(ctx, ref)
	if err != nil {
		if store.ErrorCode(err) == store.ENOTFOUND {
			return errorf(ENOTFOUND, "no local activity %s", ref)
		}
		return err
	}
	out := ActivityStatus{ActivityID: act.URI, Type: act.Type, Actor: act.ActorURI, Published: utc(act.Published),
		EventID: act.EventID, Summary: map[string]int{}, Inboxes: []InboxStatus{}}
	now := a.cfg.Now()
	if act.EventID != "" {
		rows, err := a.queue.List(ctx, outbox.Filter{EventID: act.EventID, Limit: 1})
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			e := a.eventJSON(rows[0], now, false)
			out.FanOut = &e
		}
	}
	inboxes, err := a.cfg.Deliveries.ActivityDeliveries(ctx, act.URI, q.Get("cursor"), limit+1)
	if err != nil {
		return err
	}
	inboxes, out.NextCursor = trimPage(inboxes, limit, func(in InboxStatus) string { return in.Inbox })
	for _, in := range inboxes {
		if in.State == "" {
			in.State = StatePending
		}
		if in.State == StateDelivered {
			// An error of an earlier attempt explains nothing any more.
			in.LastError, in.NextAttemptAt = "", time.Time{}
		}
		out.Summary[in.State]++
		out.Inboxes = append(out.Inboxes, in)
	}
	return writeJSON(w, http.StatusOK, out)
}
