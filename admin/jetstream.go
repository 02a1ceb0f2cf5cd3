package admin

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/outbox/natsbus"
)

// jetStreamDB is the JetStream implementation over the courier database:
// the records the worker's advisory recorder writes, and replay requests the
// worker performs.
type jetStreamDB struct {
	read, write *sql.DB
	now         func() time.Time
}

// NewJetStream returns the JetStream record of the courier database: read is
// a read pool (sqldb.DB.Read), write the writer (sqldb.DB.Write); now is
// the clock of replay requests (nil: time.Now). Wire it only when the bus is
// nats in JetStream mode.
func NewJetStream(read, write *sql.DB, now func() time.Time) JetStream {
	if now == nil {
		now = time.Now
	}
	return &jetStreamDB{read: read, write: write, now: now}
}

func (j *jetStreamDB) ListExhausted(ctx context.Context, f natsbus.ExhaustedFilter) ([]natsbus.Exhausted, error) {
	return natsbus.ListExhausted(ctx, j.read, f)
}

func (j *jetStreamDB) Replay(ctx context.Context, id int64) error {
	return natsbus.Replay(ctx, j.write, id, j.now())
}

func (j *jetStreamDB) ReplayEvent(ctx context.Context, eventID string) (int64, error) {
	return natsbus.ReplayEvent(ctx, j.write, eventID, j.now())
}

// errNoJetStream answers the JetStream endpoints on a db-bus server.
var errNoJetStream = errorf(EUNAVAILABLE,
	"JetStream is not in use on this server (EVENT_BUS_BACKEND=db, or NATS_MODE=core); dead-lettered events are listed by /admin/events?status=dead_lettered")

func exhaustedFilter(eventID, reason string, before int64, limit int) natsbus.ExhaustedFilter {
	return natsbus.ExhaustedFilter{EventID: eventID, Reason: reason, BeforeID: before, Limit: limit}
}

func exhaustedJSON(list []natsbus.Exhausted) []Exhausted {
	out := make([]Exhausted, 0, len(list))
	for _, e := range list {
		out = append(out, Exhausted{
			ID: e.ID, Reason: e.Reason, Stream: e.Stream, Consumer: e.Consumer, StreamSeq: e.StreamSeq,
			Deliveries: e.Deliveries, EventID: e.EventID, EventType: e.EventType, Detail: e.Detail,
			AdvisedAt: utc(e.AdvisedAt), RecordedAt: utc(e.RecordedAt), ReplayRequestedAt: utc(e.ReplayRequestedAt),
			Replays: e.Replays, ReplayedAt: utc(e.ReplayedAt), ReplayError: e.ReplayError,
		})
	}
	return out
}

var exhaustedParams = map[string]bool{"event_id": true, "reason": true, "cursor": true, "limit": true}

func (a *API) listExhausted(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.JetStream == nil {
		return errNoJetStream
	}
	q := r.URL.Query()
	if err := checkParams(q, exhaustedParams); err != nil {
		return err
	}
	reason := q.Get("reason")
	if reason != "" && reason != "max_deliveries" && reason != "terminated" {
		return errorf(EINVALID, "reason %q: want max_deliveries or terminated", reason)
	}
	eventID := q.Get("event_id")
	if eventID != "" {
		id, err := uuid.Parse(eventID)
		if err != nil {
			return errorf(EINVALID, "event_id %q is not a UUID", eventID)
		}
		eventID = id.String()
	}
	var before int64
	if s := q.Get("cursor"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return errorf(EINVALID, "cursor %q is not one this API returned", s)
		}
		before = n
	}
	limit, err := parseLimit(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	// One more than asked tells whether a next page exists.
	list, err := a.cfg.JetStream.ListExhausted(r.Context(), exhaustedFilter(eventID, reason, before, limit+1))
	if err != nil {
		return err
	}
	var out ExhaustedList
	list, out.NextCursor = trimPage(list, limit, func(e natsbus.Exhausted) string { return cursor(e.ID) })
	out.Exhausted = exhaustedJSON(list)
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) replayExhausted(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.JetStream == nil {
		return errNoJetStream
	}
	ref := mux.Vars(r)["id"]
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || id < 1 {
		return errorf(EINVALID, "record %q: want the id of an exhausted-message record", ref)
	}
	if err := a.cfg.JetStream.Replay(r.Context(), id); err != nil {
		if errors.Is(err, natsbus.ErrNotFound) {
			return errorf(ENOTFOUND, "no exhausted-message record %d", id)
		}
		return err
	}
	a.log.InfoContext(r.Context(), "admin: jetstream replay requested", "record", id, "count", 1)
	return writeJSON(w, http.StatusAccepted, ActionResult{Action: "replay", RecordID: id,
		Message: "replay requested; a worker republishes it"})
}

// replayEvent replays the latest exhausted record of an event.
func (a *API) replayEvent(w http.ResponseWriter, r *http.Request) error {
	if a.cfg.JetStream == nil {
		return errNoJetStream
	}
	ref := mux.Vars(r)["id"]
	id, err := uuid.Parse(ref)
	if err != nil {
		return errorf(EINVALID, "event %q: want an event UUID", ref)
	}
	rec, err := a.cfg.JetStream.ReplayEvent(r.Context(), id.String())
	if err != nil {
		if errors.Is(err, natsbus.ErrNotFound) {
			return errorf(ENOTFOUND, "event %s has no exhausted JetStream message", id)
		}
		return err
	}
	a.log.InfoContext(r.Context(), "admin: jetstream replay requested", "event_id", id.String(), "record", rec,
		"count", 1)
	return writeJSON(w, http.StatusAccepted, ActionResult{Action: "replay", EventID: id.String(), RecordID: rec,
		Message: "replay requested; a worker republishes it"})
}
