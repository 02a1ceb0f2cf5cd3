package natsbus

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/courier-ap/courier/outbox"
)

// ErrNotFound is returned by Replay and ReplayEvent when no exhausted
// message matches.
var ErrNotFound = errors.New("natsbus: not found")

// Reasons an exhausted message was recorded for.
const (
	reasonMaxDeliveries = "max_deliveries"
	reasonTerminated    = "terminated"
)

// advisory is the part of a max-deliveries or terminated advisory the
// recorder reads (nats-server JSConsumerDeliveryExceededAdvisory and
// JSConsumerDeliveryTerminatedAdvisory).
type advisory struct {
	Type       string    `json:"type"`
	ID         string    `json:"id"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	Reason     string    `json:"reason"`
}

// recordAdvisories consumes the advisory stream until ctx ends: each
// advisory is counted and recorded in jetstream_exhausted with the event id
// read back from the events stream, then acked. A redelivered advisory is
// recorded and counted once (advisory_id is unique).
func (b *Bus) recordAdvisories(ctx context.Context, js jetstream.JetStream) error {
	return b.restart(ctx, func(ctx context.Context) error { return b.recordFrom(ctx, js) },
		"advisory recorder stopped; restarting", "stream", b.cfg.AdvisoryStream)
}

// recordFrom records the advisories of one pull iterator until it fails.
func (b *Bus) recordFrom(ctx context.Context, js jetstream.JetStream) error {
	it, err := b.messages(ctx, js, "advisory consumer", b.cfg.AdvisoryStream, b.cfg.AdvisoryDurable, 16)
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return err
		}
		if err := b.recordAdvisory(ctx, js, m.Subject(), m.Data()); err != nil {
			b.log.WarnContext(ctx, "advisory not recorded; will retry", "subject", m.Subject(), "err", err)
			_ = m.NakWithDelay(b.cfg.PauseMin)
			continue
		}
		_ = m.Ack()
	}
}

// recordAdvisory records one advisory; it returns an error only when the
// advisory should be retried.
func (b *Bus) recordAdvisory(ctx context.Context, js jetstream.JetStream, subject string, data []byte) error {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil || a.ID == "" || a.StreamSeq == 0 {
		b.log.WarnContext(ctx, "advisory not understood; skipped", "subject", subject, "err", err)
		return nil
	}
	reason := reasonMaxDeliveries
	if strings.HasPrefix(subject, advisoryTerminated+".") {
		reason = reasonTerminated
	}
	var eventID, eventType, detail sql.NullString
	if a.Reason != "" {
		detail = sql.NullString{String: a.Reason, Valid: true}
	}
	raw, err := storedMsg(ctx, js, a.Stream, a.StreamSeq)
	switch {
	case err != nil:
		return err
	case raw != nil:
		ev, derr := decode(raw.Header, raw.Data)
		eventID = sql.NullString{String: ev.ID, Valid: ev.ID != ""}
		eventType = sql.NullString{String: ev.Type, Valid: ev.Type != ""}
		if derr != nil && !detail.Valid {
			detail = sql.NullString{String: derr.Error(), Valid: true}
		}
	case !detail.Valid:
		detail = sql.NullString{String: "message no longer in the stream", Valid: true}
	}
	at := a.Time
	if at.IsZero() {
		at = b.cfg.Now()
	}
	res, err := b.cfg.DB.ExecContext(ctx, `INSERT INTO jetstream_exhausted
		(advisory_id, reason, stream, consumer, stream_seq, deliveries, event_id, event_type, detail, advised_at, recorded_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (advisory_id) DO NOTHING`,
		a.ID, reason, a.Stream, a.Consumer, int64(a.StreamSeq), int64(a.Deliveries), eventID, eventType, detail,
		at.UnixMilli(), b.cfg.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		b.metrics.advisory(reason)
		b.log.WarnContext(ctx, "exhausted jetstream message recorded", "event_id", eventID.String,
			"type", eventType.String, "reason", reason, "stream_seq", a.StreamSeq, "deliveries", a.Deliveries)
	}
	return nil
}

// storedMsg reads message seq of stream; it returns nil and no error when
// the message or the stream is gone.
func storedMsg(ctx context.Context, js jetstream.JetStream, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	s, err := js.Stream(ctx, stream)
	var raw *jetstream.RawStreamMsg
	if err == nil {
		raw, err = s.GetMsg(ctx, seq)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s #%d: %w", stream, seq, err)
	}
	return raw, nil
}

// Exhausted is one recorded message the consumer gave up on.
type Exhausted struct {
	ID         int64
	Reason     string // "max_deliveries" or "terminated"
	Stream     string
	Consumer   string
	StreamSeq  uint64
	Deliveries int
	// EventID and EventType are read back from the stream; empty when the
	// message was gone before it was recorded.
	EventID   string
	EventType string
	// Detail is the terminate reason, or why the event could not be read.
	Detail     string
	AdvisedAt  time.Time
	RecordedAt time.Time
	// ReplayRequestedAt is set while a replay waits for a worker.
	ReplayRequestedAt time.Time
	Replays           int
	ReplayedAt        time.Time
	// ReplayError is why the last replay could not be performed.
	ReplayError string
}

// ExhaustedFilter selects rows for ListExhausted. Zero fields do not filter.
type ExhaustedFilter struct {
	// EventID selects the records of one event.
	EventID string
	// Reason selects "max_deliveries" or "terminated".
	Reason string
	// BeforeID pages backwards: only records with a smaller id.
	BeforeID int64
	// Limit caps the result (default 100, at most 10000).
	Limit int
}

const exhaustedColumns = `id, reason, stream, consumer, stream_seq, deliveries, event_id, event_type, detail,
	advised_at, recorded_at, replay_requested_at, replays, replayed_at, replay_error`

// ListExhausted lists recorded exhausted messages, newest first. It only
// reads db (any pool of the courier database); it does not need NATS.
func ListExhausted(ctx context.Context, db *sql.DB, f ExhaustedFilter) ([]Exhausted, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 10000)
	var where []string
	var args []any
	if f.EventID != "" {
		where, args = append(where, "event_id = ?"), append(args, f.EventID)
	}
	if f.Reason != "" {
		where, args = append(where, "reason = ?"), append(args, f.Reason)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	q := "SELECT " + exhaustedColumns + " FROM jetstream_exhausted"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	rows, err := db.QueryContext(ctx, q, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("natsbus: list exhausted: %w", err)
	}
	defer rows.Close()
	var out []Exhausted
	for rows.Next() {
		e, err := scanExhausted(rows)
		if err != nil {
			return nil, fmt.Errorf("natsbus: list exhausted: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("natsbus: list exhausted: %w", err)
	}
	return out, nil
}

func scanExhausted(sc interface{ Scan(...any) error }) (Exhausted, error) {
	var (
		e                          Exhausted
		seq                        int64
		evID, evType, detail, rerr sql.NullString
		advised, recorded          int64
		requested, replayed        sql.NullInt64
	)
	if err := sc.Scan(&e.ID, &e.Reason, &e.Stream, &e.Consumer, &seq, &e.Deliveries, &evID, &evType, &detail,
		&advised, &recorded, &requested, &e.Replays, &replayed, &rerr); err != nil {
		return Exhausted{}, err
	}
	e.StreamSeq = uint64(seq)
	e.EventID, e.EventType, e.Detail, e.ReplayError = evID.String, evType.String, detail.String, rerr.String
	e.AdvisedAt, e.RecordedAt = time.UnixMilli(advised), time.UnixMilli(recorded)
	if requested.Valid {
		e.ReplayRequestedAt = time.UnixMilli(requested.Int64)
	}
	if replayed.Valid {
		e.ReplayedAt = time.UnixMilli(replayed.Int64)
	}
	return e, nil
}

// Replay asks for the exhausted message with record id to be published
// again. It only writes db (the writer, sqldb.DB.Write): the server never
// talks to NATS. A worker republishes it within ReplayPoll, with a new
// Nats-Msg-Id (event id + replay number) so the broker's dedup does not drop
// it; the ledger still skips the handlers that already succeeded. It returns
// ErrNotFound when there is no such record.
func Replay(ctx context.Context, db *sql.DB, id int64, at time.Time) error {
	res, err := db.ExecContext(ctx, `UPDATE jetstream_exhausted SET replay_requested_at = ?, replay_error = NULL
		WHERE id = ?`, at.UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("natsbus: replay %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("natsbus: replay %d: %w", id, ErrNotFound)
	}
	return nil
}

// ReplayEvent is Replay for the latest exhausted record of an event; it
// returns that record's id.
func ReplayEvent(ctx context.Context, db *sql.DB, eventID string, at time.Time) (int64, error) {
	var id int64
	err := db.QueryRowContext(ctx, `SELECT id FROM jetstream_exhausted WHERE event_id = ? ORDER BY id DESC LIMIT 1`,
		eventID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("natsbus: replay event %s: %w", eventID, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("natsbus: replay event %s: %w", eventID, err)
	}
	return id, Replay(ctx, db, id, at)
}

// replayBatch bounds the replays one poll performs.
const replayBatch = 32

// replayLoop performs requested replays until ctx ends.
func (b *Bus) replayLoop(ctx context.Context, js jetstream.JetStream) error {
	t := time.NewTicker(b.cfg.ReplayPoll)
	defer t.Stop()
	for {
		if err := b.replayDue(ctx, js); err != nil && ctx.Err() == nil {
			b.log.WarnContext(ctx, "replay failed; will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type replayReq struct {
	id        int64
	stream    string
	seq       uint64
	eventID   string
	replays   int
	requested int64
}

// replayDue republishes every requested replay.
func (b *Bus) replayDue(ctx context.Context, js jetstream.JetStream) error {
	rows, err := b.cfg.DB.QueryContext(ctx, `SELECT id, stream, stream_seq, COALESCE(event_id, ''), replays,
		replay_requested_at FROM jetstream_exhausted WHERE replay_requested_at IS NOT NULL
		ORDER BY replay_requested_at LIMIT ?`, replayBatch)
	if err != nil {
		return fmt.Errorf("read replay requests: %w", err)
	}
	var reqs []replayReq
	for rows.Next() {
		var r replayReq
		var seq int64
		if err := rows.Scan(&r.id, &r.stream, &seq, &r.eventID, &r.replays, &r.requested); err != nil {
			rows.Close()
			return fmt.Errorf("read replay requests: %w", err)
		}
		r.seq = uint64(seq)
		reqs = append(reqs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read replay requests: %w", err)
	}
	for _, r := range reqs {
		if err := b.replayOne(ctx, js, r); err != nil {
			return err
		}
	}
	return nil
}

// replayOne republishes one exhausted message: the stored stream message
// when it is still there, else the event rebuilt from its outbox row. The
// record is updated only for the request it read, so a request made while
// the replay ran is performed too.
func (b *Bus) replayOne(ctx context.Context, js jetstream.JetStream, r replayReq) error {
	m, err := b.replayMsg(ctx, js, r)
	if errors.Is(err, ErrNotFound) {
		_, uerr := b.cfg.DB.ExecContext(ctx, `UPDATE jetstream_exhausted SET replay_requested_at = NULL,
			replay_error = ? WHERE id = ? AND replay_requested_at = ?`,
			"event not found in the stream nor in the outbox", r.id, r.requested)
		if uerr != nil {
			return fmt.Errorf("record replay %d: %w", r.id, uerr)
		}
		b.log.WarnContext(ctx, "replay impossible: event gone", "event_id", r.eventID, "stream_seq", r.seq)
		return nil
	}
	if err != nil {
		return err
	}
	n := r.replays + 1
	base := r.eventID
	if base == "" {
		base = fmt.Sprintf("courier-seq-%s-%d", r.stream, r.seq)
	}
	m.Header.Set(HeaderReplay, fmt.Sprint(n))
	pctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	ack, err := js.PublishMsg(pctx, m, jetstream.WithMsgID(replayMsgID(base, n)), jetstream.WithExpectStream(b.cfg.Stream))
	cancel()
	if err != nil {
		return fmt.Errorf("publish replay of %s: %w", base, err)
	}
	if _, err := b.cfg.DB.ExecContext(ctx, `UPDATE jetstream_exhausted SET replays = ?, replayed_at = ?,
		replay_requested_at = CASE WHEN replay_requested_at = ? THEN NULL ELSE replay_requested_at END,
		replay_error = NULL WHERE id = ? AND replays = ?`,
		n, b.cfg.Now().UnixMilli(), r.requested, r.id, r.replays); err != nil {
		return fmt.Errorf("record replay %d: %w", r.id, err)
	}
	b.log.InfoContext(ctx, "exhausted event replayed", "event_id", r.eventID, "replay", n,
		"stream_seq", ack.Sequence, "duplicate", ack.Duplicate)
	return nil
}

// replayMsg builds the message of a replay, or ErrNotFound.
func (b *Bus) replayMsg(ctx context.Context, js jetstream.JetStream, r replayReq) (*nats.Msg, error) {
	raw, err := storedMsg(ctx, js, r.stream, r.seq)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		m := nats.NewMsg(raw.Subject)
		for k, vs := range raw.Header {
			if strings.HasPrefix(k, "Nats-") {
				continue // the broker's own headers (msg id, expectations)
			}
			m.Header[k] = append([]string(nil), vs...)
		}
		m.Data = raw.Data
		return m, nil
	}
	if r.eventID == "" {
		return nil, ErrNotFound
	}
	rows, err := b.rows.List(ctx, outbox.Filter{EventID: r.eventID, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("read outbox row of %s: %w", r.eventID, err)
	}
	if len(rows) == 0 {
		return nil, ErrNotFound
	}
	return encode(b.cfg.SubjectPrefix, rows[0].Event), nil
}
