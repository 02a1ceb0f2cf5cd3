package admin

import (
	"encoding/json"
	"time"
)

// The JSON documents of the API. The CLI decodes the same types, so the two
// cannot drift apart. Times are RFC 3339 in UTC; zero times are left out.

// Event is one outbox row.
type Event struct {
	// RowID is the row's primary key; EventID its UUID (empty for a row
	// from a foreign writer). Either identifies the event in URLs.
	RowID   int64  `json:"row_id"`
	EventID string `json:"event_id,omitempty"`
	Type    string `json:"type"`
	// Host is the row's routing target (a delivery's remote host).
	Host string `json:"host,omitempty"`
	// Lane is the row's claim lane: interactive or bulk (outbox.LaneName).
	Lane string `json:"lane"`
	// Status is pending, processing, done or dead_lettered; Stuck is set on
	// a processing row claimed longer ago than the lease.
	Status string `json:"status"`
	Stuck  bool   `json:"stuck,omitempty"`
	// Superseded is set on a done delivery that was not sent: a Create or
	// Update whose object was deleted before it went (package delivery,
	// order.go). Retrying it sends nothing.
	Superseded    bool      `json:"superseded,omitempty"`
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	ClaimedAt     time.Time `json:"claimed_at,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	OccurredAt    time.Time `json:"occurred_at,omitzero"`
	CreatedAt     time.Time `json:"created_at,omitzero"`
	UpdatedAt     time.Time `json:"updated_at,omitzero"`
	// AgeSeconds is how long ago the event was enqueued.
	AgeSeconds int64 `json:"age_seconds"`
	// Payload is the event's JSON body (only in the detail of one event).
	Payload json.RawMessage `json:"payload,omitempty"`
}

// EventList is a page of events.
type EventList struct {
	Events []Event `json:"events"`
	// NextCursor continues the listing (pass it as cursor); empty when
	// there is nothing after this page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// LedgerRow is one processed-events ledger row of an event.
type LedgerRow struct {
	Handler     string    `json:"handler"`
	Status      string    `json:"status"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	ProcessedAt time.Time `json:"processed_at,omitzero"`
}

// EventDetail is one event in full.
type EventDetail struct {
	Event  Event       `json:"event"`
	Ledger []LedgerRow `json:"ledger"`
	// DeliveryAttempts are the POSTs made for the event (empty for events
	// that deliver nothing; absent when no delivery record is wired).
	DeliveryAttempts []DeliveryAttempt `json:"delivery_attempts,omitempty"`
	// Exhausted are the JetStream records of the event (JetStream bus only).
	Exhausted []Exhausted `json:"jetstream_exhausted,omitempty"`
}

// Stats counts the outbox.
type Stats struct {
	// Counts is rows per status and event type.
	Counts map[string]map[string]int64 `json:"counts"`
	// Totals is rows per status.
	Totals map[string]int64 `json:"totals"`
	// Stuck is how many processing rows are past their lease.
	Stuck int64 `json:"stuck"`
	// LeaseSeconds is the lease Stuck is measured against.
	LeaseSeconds int64 `json:"lease_seconds"`
	// AllowPrivateAddresses is COURIER_ALLOW_PRIVATE_ADDRESSES: the server
	// fetches from and delivers to loopback and private addresses.
	AllowPrivateAddresses bool `json:"allow_private_addresses"`
	// OldestDueSeconds is how long the pending row that has been due the
	// longest has waited since it became due (0 when none is due).
	OldestDueSeconds int64 `json:"oldest_due_seconds"`
	// Processes are the processes that deliver from this database (seen in
	// the last 30 s), which share each host's per-host concurrency; absent
	// when the server does not know them.
	Processes []Process `json:"delivering_processes,omitempty"`
}

// Process is one process that delivers.
type Process struct {
	ID        string    `json:"id"`
	Hostname  string    `json:"hostname"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
}

// RetryResult answers a retry of a filtered set of events.
type RetryResult struct {
	// Matched is how many dead-lettered events matched the filter (within
	// the limit); Retried how many were put back to pending (0 on a dry
	// run); Skipped how many changed state meanwhile and were left alone.
	Matched int64 `json:"matched"`
	Retried int64 `json:"retried"`
	Skipped int64 `json:"skipped"`
	DryRun  bool  `json:"dry_run,omitempty"`
	// NextCursor is set when more events may match beyond the limit.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ActionResult answers a state-changing action on one thing.
type ActionResult struct {
	Action  string `json:"action"`
	EventID string `json:"event_id,omitempty"`
	RowID   int64  `json:"row_id,omitempty"`
	Host    string `json:"host,omitempty"`
	Domain  string `json:"domain,omitempty"`
	// Count is how many rows the action changed where it counts them
	// (deliveries released or discarded).
	Count *int64 `json:"count,omitempty"`
	// RecordID is the exhausted-message record a replay was requested for.
	RecordID int64  `json:"record_id,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Exhausted is a JetStream message the consumer gave up on.
type Exhausted struct {
	ID                int64     `json:"id"`
	Reason            string    `json:"reason"`
	Stream            string    `json:"stream"`
	Consumer          string    `json:"consumer"`
	StreamSeq         uint64    `json:"stream_seq"`
	Deliveries        int       `json:"deliveries"`
	EventID           string    `json:"event_id,omitempty"`
	EventType         string    `json:"event_type,omitempty"`
	Detail            string    `json:"detail,omitempty"`
	AdvisedAt         time.Time `json:"advised_at,omitzero"`
	RecordedAt        time.Time `json:"recorded_at,omitzero"`
	ReplayRequestedAt time.Time `json:"replay_requested_at,omitzero"`
	Replays           int       `json:"replays"`
	ReplayedAt        time.Time `json:"replayed_at,omitzero"`
	ReplayError       string    `json:"replay_error,omitempty"`
}

// ExhaustedList is a page of exhausted messages, newest first.
type ExhaustedList struct {
	Exhausted  []Exhausted `json:"exhausted"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// ActivityStatus is the delivery status of one local activity.
type ActivityStatus struct {
	ActivityID string    `json:"activity_id"`
	Type       string    `json:"type"`
	Actor      string    `json:"actor"`
	Published  time.Time `json:"published,omitzero"`
	EventID    string    `json:"event_id,omitempty"`
	// FanOut is the outbox row of the event that expands the activity into
	// deliveries; while it is not done the inbox list may be incomplete.
	FanOut *Event `json:"fan_out,omitempty"`
	// Summary counts the inboxes of this page per state.
	Summary map[string]int `json:"summary"`
	Inboxes []InboxStatus  `json:"inboxes"`
	// NextCursor continues the inbox list (pass it as cursor).
	NextCursor string `json:"next_cursor,omitempty"`
}

// HostList is a page of hosts.
type HostList struct {
	Hosts      []Host `json:"hosts"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// DomainBlock is a blocked domain.
type DomainBlock struct {
	Domain    string    `json:"domain"`
	Reason    string    `json:"reason"`
	CreatedAt time.Time `json:"created_at,omitzero"`
}

// DomainBlockList lists the blocked domains.
type DomainBlockList struct {
	DomainBlocks []DomainBlock `json:"domain_blocks"`
}

// DrainPreview is the body of a drain refused for want of confirmation.
type DrainPreview struct {
	Error        string `json:"error"`
	Code         Code   `json:"code"`
	Host         string `json:"host"`
	WouldDiscard int64  `json:"would_discard"`
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  Code   `json:"code,omitempty"`
}
