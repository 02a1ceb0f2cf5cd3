package natsbus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/courier-ap/courier/outbox"
)

// Message headers. The body is the event's JSON payload as stored.
const (
	HeaderEventID    = "Courier-Event-Id"
	HeaderEventType  = "Courier-Event-Type"
	HeaderTarget     = "Courier-Event-Target"
	HeaderOccurredAt = "Courier-Occurred-At"
	// HeaderReplay numbers a replay of an exhausted message (1, 2, ...).
	HeaderReplay = "Courier-Replay"
	// HeaderAttempts is the number of attempts the event had spent before
	// this message was published (after a hand-back); the consumer counts
	// the message's deliveries on top of it.
	HeaderAttempts = "Courier-Attempts"
)

// errBadMessage marks a message that cannot be turned back into an event.
var errBadMessage = errors.New("natsbus: bad message")

// subjectFor returns the subject of an event type: prefix.type, with every
// character that a NATS subject token cannot carry replaced by '_' and empty
// tokens filled, so any type yields a valid literal subject.
func subjectFor(prefix, typ string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 1 + len(typ))
	b.WriteString(prefix)
	b.WriteByte('.')
	tokStart := true
	for _, r := range typ {
		switch {
		case r == '.':
			if tokStart {
				b.WriteByte('_')
			}
			b.WriteByte('.')
			tokStart = true
			continue
		case r <= ' ' || r == '*' || r == '>' || r == 0x7f:
			b.WriteByte('_')
		default:
			b.WriteRune(r)
		}
		tokStart = false
	}
	if tokStart {
		b.WriteByte('_')
	}
	return b.String()
}

// msgID is the Nats-Msg-Id of a row: its event id, or for a row without one
// (a foreign writer's) an id derived from the row id, so the broker still
// drops a repeated publish of that row.
func msgID(rowID int64, eventID string) string {
	if eventID != "" {
		return eventID
	}
	return fmt.Sprintf("courier-row-%d", rowID)
}

// rowMsgID is the Nats-Msg-Id of a row's publish: msgID for its first, and
// for the publish after the n-th hand-back (outbox.Queue.HandBack) msgID
// with ".r<n>", new, so the broker's duplicate window does not drop it, and
// the same for every try of that publish, so a publish whose ack was lost
// is still dropped as a duplicate.
func rowMsgID(r outbox.Row) string {
	id := msgID(r.ID, r.Event.ID)
	if r.Republished > 0 {
		id = fmt.Sprintf("%s.r%d", id, r.Republished)
	}
	return id
}

// encodeRow is encode for a claimed outbox row: it also carries the
// attempts the row had spent.
func encodeRow(prefix string, r outbox.Row) *nats.Msg {
	m := encode(prefix, r.Event)
	if r.Attempts > 0 {
		m.Header.Set(HeaderAttempts, strconv.Itoa(r.Attempts))
	}
	return m
}

// spentAttempts reads HeaderAttempts (0 when absent or malformed).
func spentAttempts(h nats.Header) int {
	n, err := strconv.Atoi(h.Get(HeaderAttempts))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// replayMsgID is the Nats-Msg-Id of the n-th replay of an event: new, so the
// broker's dedup does not drop it, and deterministic, so a repeated request
// for the same replay is dropped.
func replayMsgID(base string, n int) string {
	return fmt.Sprintf("%s.replay.%d", base, n)
}

// encode builds the message of an event. The subject is derived from the
// type; headers carry the id, type, target and occurrence time.
func encode(prefix string, ev outbox.Event) *nats.Msg {
	m := nats.NewMsg(subjectFor(prefix, ev.Type))
	if ev.ID != "" {
		m.Header.Set(HeaderEventID, ev.ID)
	}
	m.Header.Set(HeaderEventType, ev.Type)
	if ev.Target != "" {
		m.Header.Set(HeaderTarget, ev.Target)
	}
	if !ev.OccurredAt.IsZero() {
		m.Header.Set(HeaderOccurredAt, ev.OccurredAt.UTC().Format(time.RFC3339Nano))
	}
	m.Data = ev.Payload
	return m
}

// decode reads an event back from a message's headers and body. The
// event's payload is data itself, not a copy: nats.go gives every message,
// stream message and reply a buffer of its own.
func decode(h nats.Header, data []byte) (outbox.Event, error) {
	ev := outbox.Event{
		ID:     h.Get(HeaderEventID),
		Type:   h.Get(HeaderEventType),
		Target: h.Get(HeaderTarget),
	}
	if ev.Type == "" {
		return ev, fmt.Errorf("%w: no %s header", errBadMessage, HeaderEventType)
	}
	if s := h.Get(HeaderOccurredAt); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return ev, fmt.Errorf("%w: %s %q: %v", errBadMessage, HeaderOccurredAt, s, err)
		}
		ev.OccurredAt = t
	}
	if len(data) == 0 {
		data = []byte("{}")
	}
	if !json.Valid(data) {
		return ev, fmt.Errorf("%w: payload is not JSON", errBadMessage)
	}
	ev.Payload = data
	return ev, nil
}
