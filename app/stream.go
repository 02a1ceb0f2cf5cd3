package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/httpedge"
	"github.com/courier-ap/courier/store"
)

// streamBatch is how many items a stream lists per query: their seqs and
// types only. Each item's document is read when its event is written, so
// that a stream holds one item at a time, whatever the size of its items.
const streamBatch = 16

// retryMillis is the reconnection delay a stream suggests to its client.
const retryMillis = 2000

// streamOf serves GET /users/{name}/inbox/stream or .../outbox/stream:
// the Server-Sent Events of the actor's view v, as "Server-Sent Events for
// the ActivityPub API" shapes them (Event). Every event's id is the item's
// seq; a client that reconnects with Last-Event-ID (the header, or the
// query parameter of that name) gets every item after it, and without
// one, those recorded from now on.
func (h *Handler) streamOf(v view) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { h.stream(w, r, v) }
}

func (h *Handler) stream(w http.ResponseWriter, r *http.Request, v view) {
	a, err := h.owner(r)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	last, err := lastEventID(r)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	if last < 0 {
		if last, err = h.total(r.Context(), v, a.ID); err != nil {
			httpedge.WriteError(w, r, h.log, err)
			return
		}
	}
	release, err := h.admit(v, a.ID)
	if err != nil {
		httpedge.WriteError(w, r, h.log, err)
		return
	}
	defer release()

	// A stream outlives the server's write timeout; each of its writes
	// has a deadline of its own instead (write).
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	ctx := r.Context()
	// write sends what f writes within the stream's write timeout: a
	// client that reads nothing for that long gets its stream closed, and
	// its place is free again.
	bw := bufio.NewWriterSize(w, 32<<10)
	write := func(f func(io.Writer)) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		f(bw)
		err := bw.Flush()
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			if ctx.Err() == nil {
				h.log.DebugContext(ctx, "app: stream closed: its client did not read", "actor", a.Name,
					"timeout", h.cfg.WriteTimeout, "err", err)
			}
			return false
		}
		return true
	}
	w.WriteHeader(http.StatusOK)
	if !write(func(w io.Writer) { fmt.Fprintf(w, "retry: %d\n\n", retryMillis) }) {
		return
	}
	target := v.uri(h.uris, a.Name)
	keepAlive := time.NewTicker(h.cfg.KeepAlive)
	defer keepAlive.Stop()
	poll := time.NewTicker(h.cfg.Poll)
	defer poll.Stop()
	for {
		woken := h.wake.wait() // taken before reading: a commit after the read wakes us
		items, err := h.after(ctx, v, a.ID, last, streamBatch)
		if err != nil {
			if ctx.Err() == nil {
				h.log.WarnContext(ctx, "app: stream read failed; the client reconnects", "actor", a.Name, "err", err)
			}
			return
		}
		for _, it := range items {
			doc, err := h.document(ctx, v, a.ID, it.seq)
			if err != nil {
				if ctx.Err() == nil {
					h.log.WarnContext(ctx, "app: stream read failed; the client reconnects", "actor", a.Name, "err", err)
				}
				return
			}
			data, err := Event(target, it.typ, doc)
			doc = nil
			if err != nil {
				h.log.WarnContext(ctx, "app: stream event unreadable; skipped", "actor", a.Name, "seq", it.seq, "err", err)
				data = []byte(`{"@context":"https://www.w3.org/ns/activitystreams","type":"Add","target":` +
					strconv.Quote(target) + `}`)
			}
			if !write(func(w io.Writer) { fmt.Fprintf(w, "id: %d\ndata: %s\n\n", it.seq, data) }) {
				return
			}
			h.cfg.Metrics.StreamEvents(v.collection, 1)
			last = it.seq
		}
		if len(items) > 0 {
			keepAlive.Reset(h.cfg.KeepAlive)
			if len(items) == streamBatch {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-h.closed:
			return
		case <-woken:
		case <-poll.C:
		case <-keepAlive.C:
			if !write(func(w io.Writer) { fmt.Fprint(w, ": keep-alive\n\n") }) {
				return
			}
		}
	}
}

// after lists up to limit items of the actor's view v after seq, oldest
// first: their seqs and types, without their documents.
func (h *Handler) after(ctx context.Context, v view, actorID, seq int64, limit int) ([]row, error) {
	rows, err := h.db.Read.QueryContext(ctx, `SELECT seq, type FROM `+v.items+
		` WHERE actor_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?`, actorID, seq, limit)
	if err != nil {
		return nil, fmt.Errorf("app: %s stream: %w", v.collection, err)
	}
	defer rows.Close()
	var out []row
	for rows.Next() {
		var it row
		if err := rows.Scan(&it.seq, &it.typ); err != nil {
			return nil, fmt.Errorf("app: %s stream: %w", v.collection, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("app: %s stream: %w", v.collection, err)
	}
	return out, nil
}

// document is the document of the actor's item seq of view v.
func (h *Handler) document(ctx context.Context, v view, actorID, seq int64) (json.RawMessage, error) {
	var doc []byte
	err := h.db.Read.QueryRowContext(ctx, `SELECT document FROM `+v.items+` WHERE actor_id = ? AND seq = ?`,
		actorID, seq).Scan(&doc)
	if err != nil {
		return nil, fmt.Errorf("app: %s stream item %d: %w", v.collection, seq, err)
	}
	return doc, nil
}

// lastEventID is the request's Last-Event-ID (header, or query parameter
// Last-Event-ID or last_event_id); -1 when it has none.
func lastEventID(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		q := r.URL.Query()
		v = q.Get("Last-Event-ID")
		if v == "" {
			v = q.Get("last_event_id")
		}
	}
	if v == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, store.Errorf(store.EINVALID, "Last-Event-ID %q is not an event id of this stream", v)
	}
	return n, nil
}

// admit takes a stream's place for actorID on v, or refuses it (503 with
// Retry-After) when the process or the actor has all its streams open
// (inbox and outbox streams count together).
func (h *Handler) admit(v view, actorID int64) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.closed:
		return nil, &httpedge.RetryError{Wait: 5 * time.Second, Err: store.Errorf(httpedge.EUnavailable, "the server is shutting down")}
	default:
	}
	if h.streams >= h.cfg.MaxStreams {
		return nil, &httpedge.RetryError{Wait: 10 * time.Second, Err: store.Errorf(httpedge.EUnavailable,
			"%d streams are open, the most this server keeps", h.cfg.MaxStreams)}
	}
	if h.perActor[actorID] >= h.cfg.MaxStreamsPerActor {
		return nil, &httpedge.RetryError{Wait: 10 * time.Second, Err: store.Errorf(httpedge.EUnavailable,
			"this actor has %d streams open, the most it may", h.cfg.MaxStreamsPerActor)}
	}
	h.streams++
	h.perActor[actorID]++
	h.cfg.Metrics.StreamOpened(v.collection, 1)
	return func() {
		h.cfg.Metrics.StreamOpened(v.collection, -1)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.streams--
		if h.perActor[actorID]--; h.perActor[actorID] <= 0 {
			delete(h.perActor, actorID)
		}
	}, nil
}

// Streams returns the number of open streams.
func (h *Handler) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams
}

// Event is the data of the stream event of an item whose activity, of
// type typ, is doc, in the collection inbox (an inbox or an outbox): an
// activity that adds to the collection is an Add of it to the collection;
// an Update is an Update carrying the object's new representation; a
// Delete is a Delete of the object; an Undo is a Remove, from the
// collection, of the activity it undoes.
func Event(inbox, typ string, doc json.RawMessage) ([]byte, error) {
	var act struct {
		ID     string          `json:"id"`
		Actor  json.RawMessage `json:"actor"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(doc, &act); err != nil {
		return nil, err
	}
	ev := map[string]any{"@context": activitypub.ActivityStreams}
	switch typ {
	case "Update":
		ev["type"] = "Update"
		ev["id"] = act.ID
		ev["actor"] = act.Actor
		ev["object"] = act.Object
	case "Delete":
		ev["type"] = "Delete"
		ev["id"] = act.ID
		ev["actor"] = act.Actor
		ev["object"] = objectID(act.Object)
	case "Undo":
		ev["type"] = "Remove"
		ev["object"] = objectID(act.Object)
		ev["target"] = inbox
	default:
		ev["type"] = "Add"
		ev["object"] = doc
		ev["target"] = inbox
	}
	if act.Object == nil && ev["type"] != "Add" {
		delete(ev, "object")
	}
	return marshal(ev)
}

// objectID is the id of an "object" property: the string, or the
// embedded object's id; the property as it is when neither.
func objectID(raw json.RawMessage) any {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &o) == nil && o.ID != "" {
		return o.ID
	}
	return raw
}
