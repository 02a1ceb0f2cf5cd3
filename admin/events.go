package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/outbox"
)

// Statuses the event filter accepts; stuck is processing past the lease.
const (
	statusStuck = "stuck"
)

// Listing bounds.
const (
	defaultLimit = 100
	// maxLimit bounds a page. It stays below the 1000 rows the packages
	// behind the API return at most, so asking them for one more than a
	// page tells whether another page follows.
	maxLimit = 500
	// pageSize is how many rows one outbox query returns while scanning.
	pageSize = 500
	// maxScan bounds the rows one request examines when a filter the outbox
	// cannot apply (stuck, older_than) is in use; the answer's cursor goes
	// on from where the scan stopped.
	maxScan = 50_000
	// maxBulkRetry bounds the events one bulk retry changes.
	maxBulkRetry = 10_000
)

// eventFilter is a parsed event filter.
type eventFilter struct {
	status    string // as asked: pending, processing, stuck, done, dead_lettered or ""
	typ       string
	host      string
	olderThan time.Duration
	after     int64
	limit     int
}

// parseEventFilter reads status, type, host, older_than, cursor and limit;
// unknown parameters are refused, so a typo never silently widens a
// listing (or a bulk retry).
func parseEventFilter(q url.Values, allowed map[string]bool, defLimit, maxLim int) (eventFilter, error) {
	f := eventFilter{limit: defLimit}
	if err := checkParams(q, allowed); err != nil {
		return f, err
	}
	switch s := q.Get("status"); s {
	case "", outbox.StatusPending, outbox.StatusProcessing, outbox.StatusDone, outbox.StatusDeadLettered, statusStuck:
		f.status = s
	default:
		return f, errorf(EINVALID, "status %q: want pending, processing, stuck, dead_lettered or done", s)
	}
	f.typ = q.Get("type")
	if h := q.Get("host"); h != "" {
		f.host = strings.ToLower(h)
	}
	if s := q.Get("older_than"); s != "" {
		d, err := parseAge(s)
		if err != nil {
			return f, err
		}
		f.olderThan = d
	}
	if s := q.Get("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return f, errorf(EINVALID, "cursor %q is not one this API returned", s)
		}
		f.after = n
	}
	limit, err := parseLimit(q, defLimit, maxLim)
	if err != nil {
		return f, err
	}
	f.limit = limit
	return f, nil
}

// checkParams refuses a parameter not in allowed.
func checkParams(q url.Values, allowed map[string]bool) error {
	for k := range q {
		if !allowed[k] {
			return errorf(EINVALID, "unknown parameter %q", k)
		}
	}
	return nil
}

// parseLimit reads the limit parameter: 1 to maxLim, defLimit when absent.
func parseLimit(q url.Values, defLimit, maxLim int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return defLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLim {
		return 0, errorf(EINVALID, "limit %q: want 1 to %d", s, maxLim)
	}
	return n, nil
}

// trimPage cuts items, fetched with one more than limit asked for, to one
// page; when more followed, it also returns the cursor that goes on after
// the page's last item.
// hostPage reads the cursor and limit of a list of hosts (GET ...?cursor=&limit=),
// lists one more than the limit with list, and returns the page (never
// nil) and the next cursor.
func hostPage[T any](r *http.Request, list func(ctx context.Context, cursor string, limit int) ([]T, error), cursorOf func(T) string) ([]T, string, error) {
	q := r.URL.Query()
	if err := checkParams(q, hostListParams); err != nil {
		return nil, "", err
	}
	limit, err := parseLimit(q, defaultLimit, maxLimit)
	if err != nil {
		return nil, "", err
	}
	items, err := list(r.Context(), q.Get("cursor"), limit+1)
	if err != nil {
		return nil, "", err
	}
	items, next := trimPage(items, limit, cursorOf)
	if items == nil {
		items = []T{}
	}
	return items, next, nil
}

func trimPage[T any](items []T, limit int, cursorOf func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, cursorOf(items[limit-1])
}

// parseAge reads a duration such as 90s, 15m, 2h or 3d (days are accepted
// on top of Go's units).
func parseAge(s string) (time.Duration, error) {
	bad := errorf(EINVALID, "older_than %q: want a duration such as 30m, 2h or 3d", s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 3650 {
			return 0, bad
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, bad
	}
	return d, nil
}

var listParams = map[string]bool{"status": true, "type": true, "host": true, "older_than": true,
	"cursor": true, "limit": true}

// scan returns up to limit rows matching f, in id order, and the cursor to
// go on from ("" when nothing follows). Filters the outbox applies itself
// (status, type, target) go into its query; stuck and older_than are
// applied here, examining at most maxScan rows per call.
func (a *API) scan(ctx context.Context, f eventFilter) ([]outbox.Row, string, error) {
	now := a.cfg.Now()
	of := outbox.Filter{Status: f.status, Type: f.typ, Target: f.host, AfterID: f.after}
	match := func(outbox.Row) bool { return true }
	filtered := false
	if f.status == statusStuck {
		of.Status, filtered = outbox.StatusProcessing, true
		match = func(r outbox.Row) bool { return a.stuck(r, now) }
	}
	// Row ids are assigned under the single write lock in the transaction
	// that also stamps created_at, so id order is enqueue order: the first
	// row younger than the cutoff ends an older_than scan.
	var cutoff time.Time
	if f.olderThan > 0 {
		cutoff, filtered = now.Add(-f.olderThan), true
	}
	var out []outbox.Row
	scanned := 0
	for {
		of.Limit = pageSize
		if !filtered {
			// The outbox applies every filter: one more row than the
			// page tells whether another page follows.
			of.Limit = min(f.limit-len(out)+1, pageSize)
		}
		rows, err := a.queue.List(ctx, of)
		if err != nil {
			return nil, "", err
		}
		for _, r := range rows {
			scanned++
			if !cutoff.IsZero() && r.CreatedAt.After(cutoff) {
				return out, "", nil
			}
			if !match(r) {
				of.AfterID = r.ID
				continue
			}
			if len(out) == f.limit {
				// One more match exists: the page goes on after the last
				// row returned.
				return out, cursor(out[len(out)-1].ID), nil
			}
			out = append(out, r)
			of.AfterID = r.ID
		}
		if len(rows) < of.Limit {
			return out, "", nil
		}
		if scanned >= maxScan {
			return out, cursor(of.AfterID), nil
		}
	}
}

func cursor(id int64) string { return strconv.FormatInt(id, 10) }

// stuck reports whether the processing row r was claimed a lease or longer
// before now.
func (a *API) stuck(r outbox.Row, now time.Time) bool {
	return !r.ClaimedAt.IsZero() && !r.ClaimedAt.After(now.Add(-a.cfg.Lease))
}

// eventJSON converts a row; payload only when withPayload.
func (a *API) eventJSON(r outbox.Row, now time.Time, withPayload bool) Event {
	e := Event{
		RowID: r.ID, EventID: r.Event.ID, Type: r.Event.Type, Host: r.Event.Target, Lane: outbox.LaneName(r.Event.Lane),
		Status: r.Status, Attempts: r.Attempts, LastError: r.LastError,
		OccurredAt: utc(r.Event.OccurredAt), CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt),
		AgeSeconds: int64(max(now.Sub(r.CreatedAt), 0) / time.Second),
	}
	if r.Status == outbox.StatusPending {
		e.NextAttemptAt = utc(r.NextAttemptAt)
	}
	if r.Status == outbox.StatusProcessing {
		e.ClaimedAt = utc(r.ClaimedAt)
		e.Stuck = a.stuck(r, now)
	}
	if withPayload {
		e.Payload = append([]byte(nil), r.Event.Payload...)
	}
	return e
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request) error {
	f, err := parseEventFilter(r.URL.Query(), listParams, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	rows, next, err := a.scan(r.Context(), f)
	if err != nil {
		return err
	}
	now := a.cfg.Now()
	out := EventList{Events: make([]Event, 0, len(rows)), NextCursor: next}
	for _, row := range rows {
		e := a.eventJSON(row, now, false)
		if e.Superseded, err = a.superseded(r.Context(), row); err != nil {
			return err
		}
		out.Events = append(out.Events, e)
	}
	return writeJSON(w, http.StatusOK, out)
}

// findRow resolves an event reference: an event UUID or a row number.
func (a *API) findRow(ctx context.Context, ref string) (outbox.Row, error) {
	if n, err := strconv.ParseInt(ref, 10, 64); err == nil && n > 0 {
		row, err := a.queue.Get(ctx, n)
		if errors.Is(err, outbox.ErrNotFound) {
			return outbox.Row{}, errorf(ENOTFOUND, "no event with row id %d", n)
		}
		return row, err
	}
	id, err := uuid.Parse(ref)
	if err != nil {
		return outbox.Row{}, errorf(EINVALID, "event %q: want an event UUID or a row number", ref)
	}
	rows, err := a.queue.List(ctx, outbox.Filter{EventID: id.String(), Limit: 1})
	if err != nil {
		return outbox.Row{}, err
	}
	if len(rows) == 0 {
		return outbox.Row{}, errorf(ENOTFOUND, "no event %s in the outbox", id)
	}
	return rows[0], nil
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	row, err := a.findRow(ctx, mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	d := EventDetail{Event: a.eventJSON(row, a.cfg.Now(), true), Ledger: []LedgerRow{}}
	if d.Event.Superseded, err = a.superseded(ctx, row); err != nil {
		return err
	}
	if row.Event.ID != "" {
		entries, err := a.queue.Ledger(ctx, row.Event.ID)
		if err != nil {
			return err
		}
		for _, e := range entries {
			d.Ledger = append(d.Ledger, LedgerRow{Handler: e.Handler, Status: e.Status,
				StartedAt: utc(e.StartedAt), ProcessedAt: utc(e.ProcessedAt)})
		}
		if a.cfg.Deliveries != nil {
			atts, err := a.cfg.Deliveries.EventAttempts(ctx, row.Event)
			if err != nil {
				return err
			}
			d.DeliveryAttempts = atts
		}
		if a.cfg.JetStream != nil {
			ex, err := a.cfg.JetStream.ListExhausted(ctx, exhaustedFilter(row.Event.ID, "", 0, maxLimit))
			if err != nil {
				return err
			}
			d.Exhausted = exhaustedJSON(ex)
		}
	}
	return writeJSON(w, http.StatusOK, d)
}

func (a *API) retryEvent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	row, err := a.findRow(ctx, mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	if err := a.queue.Retry(ctx, row.ID); err != nil {
		if errors.Is(err, outbox.ErrState) {
			if sup, serr := a.superseded(ctx, row); serr == nil && sup {
				return errorf(ECONFLICT, "event %s was superseded: the object of its Create or Update was deleted "+
					"before it went, so it is never sent; nothing to retry", eventRef(row))
			}
			return errorf(ECONFLICT, "event %s is %s, not dead_lettered: only dead-lettered events are retried",
				eventRef(row), row.Status)
		}
		return err
	}
	a.log.InfoContext(ctx, "admin: event retried", "event_id", row.Event.ID, "row", row.ID, "type", row.Event.Type,
		"host", row.Event.Target, "attempts_reset", row.Attempts, "count", 1)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "retry", EventID: row.Event.ID, RowID: row.ID,
		Message: "back to pending with attempts reset"})
}

var retryParams = map[string]bool{"status": true, "type": true, "host": true, "older_than": true,
	"cursor": true, "limit": true, "dry_run": true}

// retryEvents retries the dead-lettered events matching a filter.
func (a *API) retryEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	f, err := parseEventFilter(q, retryParams, maxLimit, maxBulkRetry)
	if err != nil {
		return err
	}
	if f.status != "" && f.status != outbox.StatusDeadLettered {
		return errorf(EINVALID, "status %q: only dead_lettered events can be retried", f.status)
	}
	f.status = outbox.StatusDeadLettered
	dry, err := parseBool(q, "dry_run")
	if err != nil {
		return err
	}
	rows, next, err := a.scan(ctx, f)
	if err != nil {
		return err
	}
	res := RetryResult{Matched: int64(len(rows)), DryRun: dry, NextCursor: next}
	if !dry {
		for _, row := range rows {
			err := a.queue.Retry(ctx, row.ID)
			switch {
			case err == nil:
				res.Retried++
			case errors.Is(err, outbox.ErrState) || errors.Is(err, outbox.ErrNotFound):
				res.Skipped++ // retried, discarded or changed since it was listed
			default:
				if res.Retried > 0 {
					a.log.InfoContext(ctx, "admin: events retried before an error", "count", res.Retried,
						"type", f.typ, "host", f.host)
				}
				return err
			}
		}
		a.log.InfoContext(ctx, "admin: dead-lettered events retried", "count", res.Retried, "skipped", res.Skipped,
			"type", f.typ, "host", f.host, "older_than", f.olderThan.String())
	}
	return writeJSON(w, http.StatusOK, res)
}

func (a *API) discardEvent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	row, err := a.findRow(ctx, mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	if err := a.queue.Discard(ctx, row.ID); err != nil {
		if errors.Is(err, outbox.ErrState) {
			return errorf(ECONFLICT, "event %s is %s: only pending or dead-lettered events are discarded",
				eventRef(row), row.Status)
		}
		return err
	}
	a.log.InfoContext(ctx, "admin: event discarded", "event_id", row.Event.ID, "row", row.ID, "type", row.Event.Type,
		"host", row.Event.Target, "status", row.Status, "count", 1)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "discard", EventID: row.Event.ID, RowID: row.ID,
		Message: "deleted from the outbox"})
}

func eventRef(r outbox.Row) string {
	if r.Event.ID != "" {
		return r.Event.ID
	}
	return "row " + strconv.FormatInt(r.ID, 10)
}

func (a *API) stats(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	st, err := a.queue.Stats(ctx)
	if err != nil {
		return err
	}
	out := Stats{Counts: map[string]map[string]int64{}, Totals: map[string]int64{},
		LeaseSeconds: int64(a.cfg.Lease / time.Second), AllowPrivateAddresses: a.cfg.AllowPrivateAddresses}
	for status, byType := range st {
		out.Counts[status] = byType
		for _, n := range byType {
			out.Totals[status] += n
		}
	}
	now := a.cfg.Now()
	due, ok, err := a.queue.OldestPendingDue(ctx, now)
	if err != nil {
		return err
	}
	if ok && due.Before(now) {
		out.OldestDueSeconds = int64(now.Sub(due) / time.Second)
	}
	if out.Totals[outbox.StatusProcessing] > 0 {
		// Processing rows are few (claimed and unsettled ones), so one
		// bounded scan counts them.
		rows, _, err := a.scan(ctx, eventFilter{status: statusStuck, limit: maxScan})
		if err != nil {
			return err
		}
		out.Stuck = int64(len(rows))
	}
	if a.cfg.Processes != nil {
		ps, err := a.cfg.Processes.Processes(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			out.Processes = append(out.Processes, Process{ID: p.ID, Hostname: p.Hostname, PID: p.PID,
				StartedAt: p.StartedAt.UTC(), SeenAt: p.SeenAt.UTC()})
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// parseBool reads an optional boolean parameter.
func parseBool(q url.Values, name string) (bool, error) {
	s := q.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errorf(EINVALID, "%s %q: want true or false", name, s)
	}
	return b, nil
}
